"""Issue #14 in the validation harness: bad numbers, a folder it cannot write, a report.json it did not write and
Ctrl-C each end with one line (exit 2, or 130 for Ctrl-C), before any case runs and without overwriting anything."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")
from validation import harness  # noqa: E402
from validation.report import ReportError, load_report  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def one_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("validation: error: ") and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("args, words", [
    (["--memory-limit", "0"], "--memory-limit must be a positive number, got 0.0"),
    (["--memory-limit", "-1"], "--memory-limit must be a positive number, got -1.0"),
    (["--memory-limit", "nan"], "--memory-limit must be a positive number, got nan"),
    (["--time-budget", "nan"], "--time-budget must be a positive number, got nan"),
    (["--time-budget", "-5"], "--time-budget must be a positive number"),
    (["--threads", "-1"], "--threads must be 1 or more, got -1"),
    (["--threads", "0"], "--threads must be 1 or more, got 0"),
])
def test_bad_numbers_are_one_line(capsys, args, words):
    assert harness.main(["--suite", "smoke", *args]) == 2
    assert words in one_line(capsys)


@pytest.mark.parametrize("out, words", [
    ("/dev/null", "--out /dev/null is not a folder"),
    ("/proc/kvplan-results", "cannot write the results to --out /proc/kvplan-results"),
    ("/dev/null/results", "cannot write the results to --out /dev/null/results"),
])
def test_out_checked_before_the_first_case(capsys, monkeypatch, out, words):
    ran = []
    monkeypatch.setattr(harness, "run_suite", lambda *a, **k: ran.append(a) or 0)  # a case would start here
    assert harness.main(["--suite", "smoke", "--out", out]) == 2
    assert words in one_line(capsys) and ran == []


@pytest.mark.skipif(not Path("/sys").is_dir(), reason="Linux /sys only")
def test_an_existing_folder_that_takes_no_files(capsys):
    # sysfs refuses new files to root too (EACCES / EPERM), so this runs in CI, which runs as root; the mkdir
    # passes (the folder exists) and the write check is what says no
    assert harness.main(["--suite", "smoke", "--out", "/sys"]) == 2
    assert "cannot write the results to --out /sys" in one_line(capsys)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes to read-only folders: /sys above runs as root")
def test_read_only_out(capsys, tmp_path):
    tmp_path.chmod(0o500)
    try:
        assert harness.main(["--suite", "smoke", "--out", str(tmp_path)]) == 2
        assert "cannot write the results" in one_line(capsys)
    finally:
        tmp_path.chmod(0o700)


FOREIGN = [
    (b"[1]", "not a report with a list of cases"),
    (b'{"cases": [{"status": "ok"}]}', "each with an id"),
    (b'{"cases": "all"}', "not a report with a list of cases"),
    (b'{"cases": [{"id": "a", "status"', "it is not JSON"),  # truncated
    (b"\x89PNG\r\n\x1a\n\x00\x00", "it is not JSON"),          # binary
]


@pytest.mark.parametrize("content, words", FOREIGN)
@pytest.mark.parametrize("resume", [[], ["--no-resume"], ["--repredict"]])
def test_foreign_report_is_refused_and_kept(capsys, tmp_path, content, words, resume):
    (tmp_path / "report.json").write_bytes(content)
    assert harness.main(["--suite", "smoke", "--out", str(tmp_path), "--cases", "no-such-case", *resume]) == 2
    assert words in one_line(capsys)
    assert (tmp_path / "report.json").read_bytes() == content


def test_report_json_that_is_a_folder(capsys, tmp_path):
    (tmp_path / "report.json").mkdir()
    with pytest.raises(ReportError, match="it is a folder"):
        load_report(tmp_path)
    assert harness.main(["--suite", "smoke", "--out", str(tmp_path), "--cases", "no-such-case"]) == 2
    one_line(capsys)


def test_default_out_is_outside_the_package():
    assert not harness.DEFAULT_OUT.is_absolute() and harness.DEFAULT_OUT.name == "kvplan-validation-results"
    assert "validation/results" not in " ".join(a.help or "" for a in harness.build_parser()._actions)


def test_ctrl_c_is_one_line_and_keeps_finished_cases(tmp_path):
    out = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "validation", "--suite", "smoke", "--out", str(out),
                             "--no-progress", "--threads", "1"], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)},
                            # a child that inherits SIGINT ignored (a background job of a non-interactive shell)
                            # gets no KeyboardInterrupt from Python: the child takes Ctrl-C as a terminal gives it
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (out / "report.json").exists():
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "Traceback" not in err, err[-2000:]
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"validation: error: interrupted: every finished case is in {out}/report.json")
    kept = load_report(out)
    assert kept is not None and len(kept["cases"]) >= 1
