"""The one error a DLFP configuration raises: its own module, so that every controller and the
parameters can raise it without importing each other."""


class DLFPConfigError(ValueError):
    """A DLFP parameter is unknown, of the wrong type or out of range."""
