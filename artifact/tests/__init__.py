"""dlfp tests: artifact/tests/<subpackage>/ mirrors artifact/dlfp/<subpackage>/; integration/ starts engines."""
