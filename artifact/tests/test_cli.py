"""The ``dlfp`` command line (:mod:`dlfp.cli`): ``--help`` lists every subcommand and answers without
importing heavy dependencies; ``stats paired-ci`` prints the paired t interval; bad input exits 2
with a message (argparse's usage errors, and the commands' own ``ValueError``/``FileNotFoundError``
as ``dlfp: error: ...``); an interrupt exits 130 (or the code it carries); delegated commands get
their own options untouched. ``main()`` runs in process."""

from __future__ import annotations

import math
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from scipy import stats as sps

from dlfp.cli import INTERRUPTED, build_parser, main
from dlfp.trials.interrupts import Interrupted

SUBCOMMANDS = ["stats", "trial", "analyze", "import-bench", "calibrate", "sim", "gpu-check", "study", "plan",
               "pipeline", "cluster", "bench"]


def test_help_lists_the_subcommands(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: dlfp ") and "Decode-Latency Feedback Prefill artifact" in out
    listed = out.split("{", 1)[1].split("}", 1)[0].split(",")
    assert listed == SUBCOMMANDS
    for name in SUBCOMMANDS:
        assert f"\n    {name} " in out, name  # each with its help line


def test_bench_help_lists_its_benchmarks(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["bench", "--help"])
    assert "{schedule,driver,load,reuse,sim,virtual,timed}" in capsys.readouterr().out


def test_trial_help_documents_the_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["trial", "--help"])
    out = capsys.readouterr().out
    for line in ("0    the run is complete", "2    bad input", "130  Ctrl-C", "143  SIGTERM", "137  SIGKILL"):
        assert line in out


def test_help_imports_no_heavy_dependency() -> None:
    code = ("import sys\nfrom dlfp.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "heavy = [m for m in ('vllm', 'torch', 'pandas', 'scipy', 'pyarrow') if m in sys.modules]\n"
            "print(' '.join(heavy), file=sys.stderr)\nsys.exit(1 if heavy else 0)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0 and done.stderr.strip() == "", done.stderr


def test_paired_ci_prints_mean_and_interval(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["stats", "paired-ci", "24.8", "30.1", "28.2"]) == 0
    assert capsys.readouterr().out == ("n=3 mean 27.70%  95% paired t CI [21.03%, 34.37%] (Student's t, 2 df)\n")


def test_paired_ci_at_another_confidence(capsys: pytest.CaptureFixture[str]) -> None:
    values = [24.8, 30.1, 28.2, 19.5]
    assert main(["stats", "paired-ci", *map(str, values), "--confidence", "0.9"]) == 0
    mean = sum(values) / 4
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / 3)
    half = sps.t.ppf(0.95, 3) * sd / 2
    assert capsys.readouterr().out == (f"n=4 mean {mean:.2f}%  90% paired t CI [{mean - half:.2f}%, "
                                       f"{mean + half:.2f}%] (Student's t, 3 df)\n")


@pytest.mark.parametrize(("argv", "message"), [
    (["stats", "paired-ci", "abc"], "argument values: invalid float value: 'abc'"),
    (["stats", "paired-ci"], "the following arguments are required: values"),
    (["stats", "paired-ci", "1", "2", "--bogus"], "unrecognized arguments: --bogus"),
    (["stats"], "the following arguments are required: what"),
    (["no-such-command"], "invalid choice: 'no-such-command'"),
    ([], "the following arguments are required: command"),
    (["trial"], "the following arguments are required: --out"),
])
def test_usage_errors_exit_2_with_a_message(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(argv)
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert "usage: dlfp" in err and message in err


@pytest.mark.parametrize(("argv", "message"), [
    (["stats", "paired-ci", "5"], "dlfp: error: values has 1 element(s); allowed: a 1-D sample of n >= 2"),
    (["stats", "paired-ci", "1", "2", "--confidence", "1.5"], "dlfp: error: confidence=1.5 is invalid"),
])
def test_bad_values_are_refused_with_exit_2(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith(message) and captured.out == ""


def test_a_missing_config_file_exits_2_before_any_work(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    assert main(["trial", str(tmp_path / "nope.yaml"), "--out", str(out)]) == 2
    assert "dlfp: error: [Errno 2] No such file or directory" in capsys.readouterr().err
    assert not out.exists()


def test_an_invalid_config_exits_2_naming_the_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text("trials: 0\n", encoding="utf-8")
    assert main(["trial", str(config), "--out", str(tmp_path / "run")]) == 2
    assert "dlfp: error: config field 'trials' = 0 is invalid" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_interrupts_exit_130_or_the_code_they_carry(monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    def interrupted(values, confidence):
        raise KeyboardInterrupt

    monkeypatch.setattr("dlfp.analysis.stats.t_ci", interrupted)
    assert main(["stats", "paired-ci", "1", "2"]) == INTERRUPTED == 130
    assert "finished units are kept, rerun the same command to resume" in capsys.readouterr().err

    def terminated(values, confidence):
        raise Interrupted(signal.SIGTERM)  # what dlfp trial's signal handler raises

    monkeypatch.setattr("dlfp.analysis.stats.t_ci", terminated)
    assert main(["stats", "paired-ci", "1", "2"]) == 143
    assert "dlfp: interrupted (SIGTERM)" in capsys.readouterr().err


def test_delegated_commands_get_their_own_options(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[list[str]] = []

    def delegate(argv: list[str]) -> int:
        seen.append(argv)
        return 7

    monkeypatch.setattr("dlfp.bench.driver_fidelity.main", delegate)
    assert main(["bench", "driver", "--rate", "5", "--help"]) == 7  # --help too: theirs, not ours
    assert seen == [["--rate", "5", "--help"]]


def test_every_delegated_command_skips_dlfps_own_help() -> None:
    parser = build_parser()
    for argv in (["study"], ["pipeline"], ["gpu-check"], ["cluster", "submit"], ["sim", "gpu-calibrate"],
                 ["bench", "schedule"], ["bench", "driver"], ["bench", "load"], ["bench", "sim"], ["bench", "virtual"],
                 ["plan"], ["cluster", "study"]):
        args, rest = parser.parse_known_args([*argv, "--help", "--x", "1"])
        assert args.delegates is True and rest == ["--help", "--x", "1"], argv


def test_a_plain_ctrl_c_is_reported_as_sigint(monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    def interrupted(values, confidence):
        raise KeyboardInterrupt

    monkeypatch.setattr("dlfp.analysis.stats.t_ci", interrupted)
    assert main(["stats", "paired-ci", "1", "2"]) == 130
    assert capsys.readouterr().err.startswith("dlfp: interrupted (SIGINT); finished units are kept")
