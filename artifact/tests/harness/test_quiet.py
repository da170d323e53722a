"""``dlfp.harness.quiet.output_to``: what this process and the processes it starts print lands in the log,
not on the terminal, and the terminal gets everything back afterwards (no engine starts here)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import pytest

from dlfp.harness.quiet import output_to, tail

CHILD = "import os, sys; print('child stdout'); print('child stderr', file=sys.stderr); os.write(2, b'child fd 2\\n')"
DRIVER = f"""
import logging, os, subprocess, sys, warnings
from dlfp.harness.quiet import output_to
logging.basicConfig()  # a handler bound to sys.stderr before the block, as vLLM's is at import
with output_to(sys.argv[1], "===== header"):
    subprocess.run([sys.executable, "-c", {CHILD!r}], check=True)  # an engine core, a worker
    print("driver print")
    warnings.warn("driver FutureWarning", FutureWarning)
    logging.warning("driver logging")
    os.write(2, b"driver fd 2 (a C++ warning)\\n")
print("terminal again")
logging.warning("logging on the terminal again")
"""


def test_a_child_process_and_the_python_level_land_in_the_log_not_on_the_terminal(tmp_path) -> None:
    """The driver runs as a process of its own, so its terminal is exactly the pipes read here."""
    log = tmp_path / "engine.log"
    done = subprocess.run([sys.executable, "-c", DRIVER, str(log)], capture_output=True, text=True, check=True)
    assert done.stdout == "terminal again\n"
    assert done.stderr == "WARNING:root:logging on the terminal again\n"
    text = log.read_text()
    assert text.startswith("===== header\n")
    for line in ("child stdout", "child stderr", "child fd 2", "driver print", "FutureWarning: driver FutureWarning",
                 "WARNING:root:driver logging", "driver fd 2 (a C++ warning)"):
        assert line in text, line


def test_in_a_process_whose_streams_are_not_its_descriptors_the_streams_follow_too(tmp_path, capsys) -> None:
    """A notebook kernel's sys.stdout/sys.stderr are the notebook's, as pytest's capsys ones are here."""
    log = tmp_path / "engine.log"
    handler = logging.StreamHandler(sys.stderr)
    logger = logging.getLogger("dlfp-test-quiet")
    logger.addHandler(handler)
    follower = logging.getLogger("dlfp-test-quiet.follower")  # some library attaches logging's last resort,
    follower.addHandler(logging.lastResort)  # whose stream is a property that reads sys.stderr
    follower.propagate = False
    try:
        with output_to(log):
            print("driver print")
            logger.warning("driver logging")
            follower.warning("last resort")
        logger.warning("logging in the notebook again")
        follower.warning("last resort in the notebook")
    finally:
        logger.removeHandler(handler)
        follower.removeHandler(logging.lastResort)
    assert capsys.readouterr() == ("", "logging in the notebook again\nlast resort in the notebook\n")
    assert log.read_text() == "driver print\ndriver logging\nlast resort\n"


def test_everything_is_put_back_when_the_block_fails_and_the_log_is_appended_to(tmp_path, capfd) -> None:
    log = tmp_path / "engine.log"
    before = sys.stdout, sys.stderr, os.fstat(1).st_ino, os.fstat(2).st_ino
    with pytest.raises(RuntimeError), output_to(log, "first"):
        subprocess.run([sys.executable, "-c", "import sys; print('dying', file=sys.stderr)"], check=True)
        raise RuntimeError("engine core died")
    assert (sys.stdout, sys.stderr, os.fstat(1).st_ino, os.fstat(2).st_ino) == before
    with output_to(log, "second"):
        print("more")
    assert log.read_text().splitlines() == ["first", "dying", "second", "more"]
    assert capfd.readouterr() == ("", "")


def test_tail_is_the_end_of_a_log_or_nothing(tmp_path) -> None:
    log = tmp_path / "x.log"
    assert tail(log) == []
    log.write_text("".join(f"line {i}\n" for i in range(100)))
    assert tail(log, 3) == ["line 97", "line 98", "line 99"]
