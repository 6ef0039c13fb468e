"""The Ray engine end to end on a local Ray instance this module starts (2 CPUs, once for the
module): the same output lines as the local engine, against the loopback chat server and the
offline ``test`` model, and resume. Skipped when ray is not installed (the ``test`` extra
installs it)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from loopback import LoopbackServer, Request, chat_completion, json_reply

from openprogram_yaml.compile.project import compile_path
from openprogram_yaml.errors import UsageError
from openprogram_yaml.run.batch import BatchJob, BatchRow, LocalEngine, RowResult, input_digest
from openprogram_yaml.run.batch.output import DoneRows, OutputWriter, done_key
from openprogram_yaml.run.batch.ray_engine import RAY_MISSING, RayEngine, RowWorker, import_ray

OFFLINE = """\
version: 1
name: tagger
model: test
methods:
  tag:
    inputs: {text: {type: string}}
    prompt: "Tag this: {{ text }}"
    response_schema:
      type: object
      properties: {tag: {type: string}, n: {type: integer}}
      required: [tag, n]
"""

LOOPBACK = """\
version: 1
name: echo
model: local:llama3
runtimes:
  - {match: "local:*", runtime: openai, options: {base_url: "%s", api_key: "sk-ray-secret-1"}}
methods:
  say:
    inputs: {text: {type: string}}
    prompt: "Say {{ text }}"
"""

#: What differs between two runs of the same row: when and how long, and the run's id.
VOLATILE = ("latency_s", "started_at", "id")


#: A Ray head in a process of its own, as ``ray start --head`` would be: the engine connects
#: to it for each batch (Ray ships a project folder only with a job it connects).
HEAD = """
import sys, ray
ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, _node_ip_address="127.0.0.1")
print(ray.get_runtime_context().gcs_address.rsplit(":", 1)[1], flush=True)
sys.stdin.read()  # until the test module closes it
ray.shutdown()
"""


@pytest.fixture(scope="module")
def ray_address() -> Iterator[str]:
    """One local Ray instance (2 CPUs) for the module; its address on 127.0.0.1."""
    pytest.importorskip("ray", reason="the Ray engine needs the ray extra (.[test] has it)")
    # Its own instance: not a cluster RAY_ADDRESS names, and no developer's keys.
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OPENAI_", "ANTHROPIC_")) and k != "RAY_ADDRESS"
    }
    env["RAY_AUTH_MODE"] = "disabled"  # a token would be needed by every test process
    head = subprocess.Popen(
        [sys.executable, "-c", HEAD],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
        text=True,
    )
    assert head.stdout is not None and head.stdin is not None
    try:
        port = head.stdout.readline().strip()
        if not port.isdigit():
            pytest.fail(f"the Ray head did not start (exit status {head.poll()})")
        yield f"127.0.0.1:{port}"
    finally:
        head.stdin.close()
        try:
            head.wait(timeout=60)
        except subprocess.TimeoutExpired:
            head.kill()
            head.wait()


def rows_of(texts: list[str]) -> list[BatchRow]:
    return [
        BatchRow(i, {"text": t}, input_digest({"text": t}), f"rows.jsonl:{i + 1}")
        for i, t in enumerate(texts)
    ]


async def _aiter(rows: list[BatchRow]) -> AsyncIterator[BatchRow]:
    for row in rows:
        yield row


def run_engine(engine: Any, job: BatchJob, rows: list[BatchRow]) -> list[RowResult]:
    async def main() -> list[RowResult]:
        return [result async for result in engine.run(job, _aiter(rows))]

    return asyncio.run(main())


def lines_by_key(results: list[RowResult]) -> dict[Any, dict[str, Any]]:
    out = {}
    for result in results:
        line = json.loads(result.line)
        for name in VOLATILE:
            line.pop(name)
        out[line["key"]] = line
    return out


def test_offline_model_same_lines_as_the_local_engine(ray_address, write) -> None:
    path = write("tagger.yaml", OFFLINE)
    program = compile_path(path)
    job = BatchJob(path=path, agent=None, method="tag", concurrency=4)
    rows = rows_of([f"ticket {i}" for i in range(12)])

    local = run_engine(LocalEngine(program), job, rows)
    on_ray = run_engine(RayEngine(program, address=ray_address), job, rows)

    assert len(on_ray) == 12
    assert lines_by_key(on_ray) == lines_by_key(local)
    assert {r.status for r in on_ray} == {"ok"}


def test_loopback_server_same_lines_and_no_secret(ray_address, write) -> None:
    with LoopbackServer() as server:

        def echo(request: Request) -> Any:
            said = request.json["messages"][-1]["content"]
            return json_reply(chat_completion(f"echo: {said}"))

        for _ in range(2 * 10):
            server.add(echo)
        path = write("echo.yaml", LOOPBACK % (server.url + "/v1"))
        program = compile_path(path)
        job = BatchJob(path=path, agent=None, method="say", concurrency=3)
        rows = rows_of([f"row {i}" for i in range(10)])

        local = run_engine(LocalEngine(program), job, rows)
        on_ray = run_engine(RayEngine(program, address=ray_address, workers=2), job, rows)
        sent = [r.json["messages"][-1]["content"] for r in server.requests]

    assert lines_by_key(on_ray) == lines_by_key(local)
    assert {r.output for r in on_ray} == {f"echo: Say row {i}" for i in range(10)}
    assert sorted(sent) == sorted([f"Say row {i}" for i in range(10)] * 2)
    assert all("sk-ray-secret-1" not in r.line for r in on_ray)


def test_resume_skips_the_rows_done_and_runs_the_rest(ray_address, write, tmp_path) -> None:
    """The driver writes; a second batch over the same output runs only the missing rows."""
    path = write("tagger.yaml", OFFLINE)
    program = compile_path(path)
    job = BatchJob(path=path, agent=None, method="tag", concurrency=4)
    rows = rows_of([f"ticket {i}" for i in range(10)])
    output = tmp_path / "out.jsonl"
    engine = RayEngine(program, address=ray_address, excludes=["out.jsonl"])

    def batch(todo: list[BatchRow]) -> int:
        done = DoneRows.read(output)
        left = [r for r in todo if done_key(r.key, r.digest) not in done]
        writer = OutputWriter(output)
        try:
            for result in run_engine(engine, job, left):
                writer.write(result.line)
        finally:
            writer.close()
        return len(left)

    assert batch(rows[:6]) == 6  # the first run stopped after six rows
    # A torn last line (the machine stopped mid-write) is cut off and its row run again.
    with output.open("a", encoding="utf-8") as handle:
        handle.write('{"key": 9, "digest": "')
    assert batch(rows) == 4
    lines = [json.loads(line) for line in output.read_text(encoding="utf-8").splitlines()]
    assert sorted(line["key"] for line in lines) == list(range(10))
    assert {line["status"] for line in lines} == {"ok"}


def test_a_program_that_does_not_compile_there_stops_with_why(ray_address, write) -> None:
    """A file the program reads but .gitignore keeps from shipping: the worker's program
    differs, and the batch says so before any row runs."""
    write(".gitignore", "prompt.txt\n")
    write("prompt.txt", "Tag this: {{ text }}")
    path = write(
        "tagger.yaml", OFFLINE.replace('prompt: "Tag this: {{ text }}"', "prompt_file: prompt.txt")
    )
    program = compile_path(path)
    job = BatchJob(path=path, agent=None, method="tag")
    with pytest.raises(UsageError, match="on the Ray cluster"):
        run_engine(RayEngine(program, address=ray_address, workers=1), job, rows_of(["a"]))


def test_each_worker_takes_its_share_of_the_rate_limits(write, monkeypatch) -> None:
    """Runs in this process (no Ray needed): W workers each limit to rpm/W and tpm/W."""
    path = write("tagger.yaml", OFFLINE)
    program = compile_path(path)
    monkeypatch.chdir(path.parent)  # where Ray puts a worker: in the shipped folder
    job = BatchJob(path=Path("tagger.yaml"), agent=None, method="tag", rpm=600, tpm=90_000)
    worker = RowWorker()
    assert asyncio.run(worker.start(job, program.version, 3)) is None
    assert (worker.limiter.rpm, worker.limiter.tpm) == (200, 30_000)
    row = rows_of(["one"])[0]
    result = asyncio.run(worker.run_row(row))
    asyncio.run(worker.close())
    assert result is not None and result.status == "ok"


def test_paths_outside_the_project_folder_are_refused(write, tmp_path) -> None:
    path = write("project/tagger.yaml", OFFLINE)
    program = compile_path(path)
    engine = RayEngine(program)
    job = BatchJob(path=path, agent=None, method="tag", replay=tmp_path / "elsewhere")
    with pytest.raises(UsageError, match="outside the project folder"):
        engine.worker_job(job)
    inside = engine.worker_job(BatchJob(path=path, agent=None, method="tag"))
    assert inside.path == Path("tagger.yaml")


def test_without_ray_a_clear_error(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # what `import ray` meets when not installed
    with pytest.raises(UsageError) as caught:
        import_ray()
    assert str(caught.value) == RAY_MISSING
    assert caught.value.exit_code == 2


def test_the_command_line_with_engine_ray_writes_what_local_writes(
    ray_address, write, tmp_path
) -> None:
    from openprogram_yaml.runner.cli import main

    path = write("tagger.yaml", OFFLINE)
    data = write("rows.jsonl", "".join(json.dumps({"text": f"t{i}"}) + "\n" for i in range(8)))
    common = ["batch", str(path), "tag", "--input", str(data), "-q", "--concurrency", "4"]
    assert main([*common, "--output", str(tmp_path / "local.jsonl")]) == 0
    out = tmp_path / "ray.jsonl"
    assert main([*common, "--output", str(out), "--engine", "ray", "--address", ray_address]) == 0

    def lines(name: str) -> dict[Any, dict[str, Any]]:
        rows = [json.loads(x) for x in (tmp_path / name).read_text().splitlines()]
        return {r["key"]: {k: v for k, v in r.items() if k not in VOLATILE} for r in rows}

    assert lines("ray.jsonl") == lines("local.jsonl")
    assert len(lines("ray.jsonl")) == 8


def test_the_command_line_without_ray_says_what_to_install(write, monkeypatch, capsys) -> None:
    from openprogram_yaml.runner.cli import main

    monkeypatch.setitem(sys.modules, "ray", None)
    path = write("tagger.yaml", OFFLINE)
    data = write("rows.jsonl", '{"text": "a"}\n')
    out = path.parent / "out.jsonl"
    argv = ["batch", str(path), "tag", "--input", str(data), "--output", str(out)]
    assert main([*argv, "--engine", "ray"]) == 2
    assert capsys.readouterr().err.strip() == f"error: {RAY_MISSING}"
    assert not out.exists()


def test_stopping_cancels_the_rows_in_flight_and_resume_runs_them(ray_address, write) -> None:
    """Closing the results mid-batch (Ctrl-C does) yields nothing for the rows in flight on
    the cluster; running the rows not yielded then finishes the batch, none twice."""
    release = threading.Event()
    with LoopbackServer() as server:

        def reply(request: Request) -> Any:
            said = request.json["messages"][-1]["content"]
            if said not in ("Say row 0", "Say row 1"):
                release.wait(timeout=60)  # held until the batch was stopped
            return json_reply(chat_completion(f"echo: {said}"))

        for _ in range(12):
            server.add(reply)
        path = write("echo.yaml", LOOPBACK % (server.url + "/v1"))
        program = compile_path(path)
        job = BatchJob(path=path, agent=None, method="say", concurrency=2)
        rows = rows_of([f"row {i}" for i in range(6)])
        engine = RayEngine(program, address=ray_address, workers=2)

        async def first_two() -> list[RowResult]:
            results = engine.run(job, _aiter(rows))
            got = [await anext(results), await anext(results)]
            await results.aclose()  # type: ignore[attr-defined]
            return got

        try:
            first = asyncio.run(first_two())
        finally:
            release.set()
        done = {r.key for r in first}
        rest = run_engine(engine, job, [r for r in rows if r.key not in done])

    assert done == {0, 1}
    assert sorted(r.key for r in first + rest) == list(range(6))
    assert {r.output for r in rest} == {f"echo: Say row {i}" for i in range(2, 6)}


def test_a_project_known_by_its_git_checkout_runs_there_too(ray_address, write, tmp_path) -> None:
    """The project folder is the git checkout (no openprogram.yaml); .git is not shipped, so
    the worker finds another project folder, yet the program is the same version."""
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    path = write("agents/tagger.yaml", OFFLINE)
    program = compile_path(path)
    assert program.root == tmp_path.resolve()
    job = BatchJob(path=path, agent=None, method="tag", concurrency=2)
    rows = rows_of(["a", "b", "c"])

    local = run_engine(LocalEngine(program), job, rows)
    on_ray = run_engine(RayEngine(program, address=ray_address), job, rows)

    assert lines_by_key(on_ray) == lines_by_key(local)


def test_dotenv_files_do_not_travel_with_the_job(write, tmp_path) -> None:
    """Keys stay off the cluster: a project's .env files are not packed into the job's
    working_dir (packed here with Ray's own packer, as ``ray.init`` packs it), even with no
    .gitignore naming them; the project's own files are."""
    pytest.importorskip("ray", reason="the Ray engine needs the ray extra (.[test] has it)")
    from ray._private.runtime_env.packaging import _zip_files

    path = write("project/tagger.yaml", OFFLINE)
    write("project/.env", "OPENAI_API_KEY=sk-dotenv-secret\n")
    write("project/.env.production", "OPENAI_API_KEY=sk-dotenv-secret\n")
    write("project/sub/.env", "OPENAI_API_KEY=sk-dotenv-secret\n")
    engine = RayEngine(compile_path(path))
    env = engine.runtime_env()
    package = tmp_path / "package.zip"
    _zip_files(env["working_dir"], env["excludes"], str(package), include_gitignore=True)
    import zipfile

    names = set(zipfile.ZipFile(package).namelist())
    assert "tagger.yaml" in names
    assert not [name for name in names if Path(name).name.startswith(".env")], names
