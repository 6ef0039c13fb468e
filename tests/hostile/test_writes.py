"""Nothing written is lost: files are replaced whole or not at all, appends survive a torn
last line, a write that fails is one clear line (the run's output still shown), and a run
stopped by SIGTERM is recorded like one stopped by Ctrl-C.

A full disk is imitated without privileges: ``/dev/full`` (every write fails with ENOSPC)
and, in a child process, a file-size limit (``RLIMIT_FSIZE``: writes past it fail).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from loopback import LoopbackServer, Reply, Request, status_reply

from openprogram_yaml.runner.cli import main

#: ``openprogram-run`` in a child process.
CLI = [sys.executable, "-m", "openprogram_yaml"]
#: Generous: the child process starts Python and compiles the agent first.
EVENT_TIMEOUT_S = 30.0

AGENT = """\
version: 1
name: echo
model: test
methods:
  say:
    inputs: {x: {type: string}}
    prompt: "p {{ x }}"
"""

# A child that cannot grow any file past a few bytes: writes beyond fail with EFBIG
# instead of killing it (SIGXFSZ ignored), as writes on a full disk fail with ENOSPC.
SMALL_FILES = """\
import resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (16, 16))
from openprogram_yaml.runner.cli import main
sys.exit(main(sys.argv[1:]))
"""


def agent(tmp_path: Path) -> Path:
    path = tmp_path / "echo.yaml"
    path.write_text(AGENT, encoding="utf-8")
    return path


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


# --- files replaced whole -----------------------------------------------------------------


def test_a_lock_that_cannot_be_written_leaves_the_old_lock_whole(tmp_path: Path) -> None:
    path = agent(tmp_path)
    lock = tmp_path / "openprogram.lock"
    old = '{"version": 1, "prompts": {"echo.say": "an older version"}}\n'
    lock.write_text(old, encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, "-c", SMALL_FILES, "lock", str(path)],
        capture_output=True,
        text=True,
        timeout=EVENT_TIMEOUT_S,
    )
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip() == f"error: cannot write {lock}: File too large"
    assert lock.read_text(encoding="utf-8") == old
    assert sorted(p.name for p in tmp_path.iterdir()) == ["echo.yaml", "openprogram.lock"]


def test_a_lock_is_replaced_not_rewritten_in_place(tmp_path: Path, capsys) -> None:
    # A reader that opened the old lock (CI checking it, an editor) keeps reading it whole.
    path = agent(tmp_path)
    lock = tmp_path / "openprogram.lock"
    lock.write_text('{"version": 1, "prompts": {"echo.say": "old"}}\n', encoding="utf-8")
    lock.chmod(0o640)
    with lock.open(encoding="utf-8") as reader:
        code, _out, _ = run(capsys, "lock", str(path))
        assert code == 0
        assert json.loads(reader.read())["prompts"] == {"echo.say": "old"}
    assert json.loads(lock.read_text())["prompts"]["echo.say"] != "old"
    assert lock.stat().st_mode & 0o777 == 0o640  # its permissions stay as they were


def test_a_link_planted_as_the_lock_is_replaced_not_written_through(tmp_path: Path, capsys) -> None:
    # A cloned repository could hold `openprogram.lock -> ~/.bashrc`.
    project = tmp_path / "project"
    project.mkdir()
    path = agent(project)
    elsewhere = tmp_path / "someone-elses-file"
    elsewhere.write_text("keep me\n", encoding="utf-8")
    (project / "openprogram.lock").symlink_to(elsewhere)
    code, _, err = run(capsys, "lock", str(path))
    assert code == 0, err
    assert elsewhere.read_text(encoding="utf-8") == "keep me\n"
    lock = project / "openprogram.lock"
    assert not lock.is_symlink()
    assert "echo.say" in json.loads(lock.read_text(encoding="utf-8"))["prompts"]


def test_recordings_are_written_with_the_users_usual_permissions(tmp_path: Path, capsys) -> None:
    # Recordings are shared through the repository; a temporary file's 0600 must not stick.
    path = agent(tmp_path)
    recordings = tmp_path / "recordings"
    old_umask = os.umask(0o022)
    try:
        code, _, err = run(capsys, str(path), "-i", "x=hi", "--record", str(recordings))
    finally:
        os.umask(old_umask)
    assert code == 0, err
    [written] = [p for p in recordings.rglob("*") if p.is_file()]
    assert written.stat().st_mode & 0o777 == 0o644


# --- appends after a torn line --------------------------------------------------------------


@pytest.mark.parametrize("option", ["--records", "--trace"])
def test_an_append_after_a_torn_last_line_starts_a_line_of_its_own(
    tmp_path: Path, capsys, option: str
) -> None:
    path = agent(tmp_path)
    log = tmp_path / "log.jsonl"
    torn = '{"id": "a run cut short by a full disk", "sta'
    log.write_text('{"id": "whole"}\n' + torn, encoding="utf-8")
    code, _out, err = run(capsys, str(path), "-i", "x=hi", option, str(log))
    assert code == 0, err
    lines = log.read_text(encoding="utf-8").splitlines()
    assert lines[:2] == ['{"id": "whole"}', torn]
    parsed = [json.loads(line) for line in lines[2:]]
    assert parsed and all(isinstance(item, dict) for item in parsed)


# --- write errors ---------------------------------------------------------------------------


@pytest.mark.parametrize("option", ["--records", "--trace"])
def test_a_full_disk_is_one_line_and_the_output_is_still_shown(
    tmp_path: Path, capsys, option: str
) -> None:
    path = agent(tmp_path)
    code, out, err = run(capsys, str(path), "-i", "x=hi", option, "/dev/full")
    assert out == "test reply to: p hi\n"
    assert err == "error: cannot write /dev/full: No space left on device\n"
    # The run succeeded but what it was asked to keep was lost: that is a failure.
    assert code == 1


def test_a_failed_run_keeps_its_exit_status_when_its_trace_cannot_be_written(
    tmp_path: Path, capsys
) -> None:
    path = agent(tmp_path)
    # A model no runtime serves is a usage error found by the run itself (exit 2).
    code, out, err = run(
        capsys, str(path), "-i", "x=hi", "--model", "nope:x", "--trace", "/dev/full"
    )
    assert code == 2
    assert out == ""
    assert "error: cannot write /dev/full: No space left on device\n" in err
    assert "no runtime serves model 'nope:x'" in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("option", "target", "reason"),
    [
        ("--trace", "folder", "is a folder"),
        ("--records", "missing/runs.jsonl", "folder {tmp}/missing does not exist"),
        ("--records", "echo.yaml/runs.jsonl", "{tmp}/echo.yaml is not a folder"),
        pytest.param(
            "--trace",
            "locked/trace.jsonl",
            "Permission denied",
            marks=pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere"),
        ),
        ("--record", "echo.yaml", "is not a folder"),
    ],
)
def test_output_paths_are_checked_before_anything_runs(
    tmp_path: Path, capsys, option: str, target: str, reason: str
) -> None:
    path = agent(tmp_path)
    (tmp_path / "folder").mkdir()
    (tmp_path / "locked").mkdir(mode=0o500)
    where = Path(target) if target.startswith("/") else tmp_path / target
    with LoopbackServer() as server:
        # Pointed at a server with no reply scripted: a request reaching it would be a run.
        path.write_text(
            AGENT.replace("model: test", "model: local:m")
            + f"runtimes:\n  - {{match: 'local:*', runtime: openai, "
            f"options: {{base_url: '{server.url}/v1'}}}}\n",
            encoding="utf-8",
        )
        code, out, err = run(capsys, str(path), "-i", "x=hi", option, str(where))
        assert server.requests == []
    assert code == 2
    assert out == ""
    expected = reason.format(tmp=tmp_path)
    assert err == f"error: cannot write {where} ({option}): {expected}; nothing was run\n"


# --- SIGTERM is Ctrl-C --------------------------------------------------------------------


SERVED_AGENT = """\
version: 1
name: echo
model: local:m
retry: {max_retries: 1}
runtimes:
  - {match: "local:*", runtime: openai, options: {base_url: "%s/v1"}}
methods:
  say:
    inputs: {x: {type: string}}
    prompt: "p {{ x }}"
"""


@pytest.mark.parametrize(("signum", "status"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_mid_run_leaves_its_trace_and_an_interrupted_record(
    tmp_path: Path, signum: int, status: int
) -> None:
    arrived, release = threading.Event(), threading.Event()

    def hold(_request: Request) -> Reply:
        arrived.set()
        release.wait(EVENT_TIMEOUT_S)  # the model never answers while the test runs
        return status_reply(500)

    records, trace = tmp_path / "runs.jsonl", tmp_path / "trace.jsonl"
    with LoopbackServer([hold]) as server:
        path = tmp_path / "echo.yaml"
        path.write_text(SERVED_AGENT % server.url, encoding="utf-8")
        proc = subprocess.Popen(
            [*CLI, str(path), "-i", "x=hi", "--records", str(records), "--trace", str(trace)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert arrived.wait(EVENT_TIMEOUT_S), "the run never reached the model"
            proc.send_signal(signum)
            out, err = proc.communicate(timeout=EVENT_TIMEOUT_S)
        finally:
            release.set()
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    assert proc.returncode == status, err
    assert "Traceback" not in err
    assert out == ""
    assert "interrupted" in err.lower()
    [record] = [json.loads(line) for line in records.read_text().splitlines()]
    assert record["status"] == "interrupted"
    nodes = [json.loads(line) for line in trace.read_text().splitlines()]
    [root] = [n for n in nodes if n.get("kind") == "run"]
    assert root["name"] == "echo.say" and root["status"] == "error"


# --- serve and --watch -----------------------------------------------------------------------


def test_serve_checks_its_records_path_before_serving(tmp_path: Path) -> None:
    path = agent(tmp_path)
    proc = subprocess.run(
        [*CLI, "serve", str(path), "--port", "0", "--records", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=EVENT_TIMEOUT_S,
    )
    assert proc.returncode == 2
    assert (
        proc.stderr == f"error: cannot write {tmp_path} (--records): is a folder; nothing was run\n"
    )


@pytest.mark.parametrize("option", ["--records", "--trace"])
def test_watch_says_a_write_failed_and_keeps_running(tmp_path: Path, option: str) -> None:
    path = agent(tmp_path)
    proc = subprocess.Popen(
        [*CLI, str(path), "-i", "x=hi", "--watch", option, "/dev/full"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert proc.stdout is not None and proc.stderr is not None
    watchdog = threading.Timer(EVENT_TIMEOUT_S, proc.kill)  # reads below never block for good
    watchdog.start()
    try:
        assert proc.stdout.readline() == "test reply to: p hi\n"
        seen = ""
        while "cannot write" not in seen:
            line = proc.stderr.readline()
            assert line, seen
            seen += line
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=EVENT_TIMEOUT_S)
    finally:
        watchdog.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert "error: cannot write /dev/full: No space left on device\n" in seen
    assert "Traceback" not in seen + err
    assert proc.returncode == 0


def test_the_test_command_checks_its_record_folder_first(tmp_path: Path, capsys) -> None:
    path = agent(tmp_path)
    code, out, err = run(capsys, "test", str(path), "--record", str(path))
    assert code == 2
    assert out == ""
    assert err == f"error: cannot write {path} (--record): is not a folder; nothing was run\n"
