"""The Runtime object: construction, call=, subclassing, content, selection, lifetime."""

from __future__ import annotations

import asyncio
import base64
import re
from pathlib import Path
from typing import Any

import pytest

from openprogram_yaml.providers.test import FakeClock, ScriptedRuntime, TestRuntime
from openprogram_yaml.runtime import Runtime

SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}


def test_seed_attributes() -> None:
    rt = Runtime(call=lambda c, m, r: "x", model="host-model")
    assert rt.model == "host-model"
    assert rt.max_retries == 6
    assert rt.system == ""
    assert rt.thinking_level == "off"
    assert re.fullmatch(r"op-[0-9a-f]+", rt.session_id)
    assert rt.on_stream is None
    assert rt.last_usage is None
    rt.exec("a")
    first = rt.session_id
    rt.exec("b")
    assert rt.session_id == first  # stable across calls


def test_call_function_receives_blocks_model_and_format() -> None:
    seen: list[tuple[Any, str, Any]] = []

    def my_llm(content: list[dict[str, Any]], model: str, response_format: Any) -> str:
        seen.append((content, model, response_format))
        return '{"n": 1}' if response_format else "hello"

    rt = Runtime(call=my_llm, model="host-model")
    rt.system = "You are terse."
    assert rt.exec("hi") == "hello"
    content, model, fmt = seen[0]
    assert model == "host-model" and fmt is None
    assert content == [
        {"type": "text", "text": "You are terse.", "role": "system"},
        {"type": "text", "text": "hi"},
    ]
    assert rt.exec("n?", response_format=SCHEMA) == {"n": 1}
    assert seen[1][2] is SCHEMA  # the caller's response_format, not a payload of ours


def test_async_call_function() -> None:
    async def my_llm(content: list[dict[str, Any]], model: str, response_format: Any) -> str:
        await asyncio.sleep(0)
        return "async hello"

    assert Runtime(call=my_llm).exec("hi") == "async hello"


def test_call_function_reply_is_validated_and_repaired() -> None:
    replies = iter(["nope", '{"n": 2}'])
    rt = Runtime(call=lambda c, m, r: next(replies))
    assert rt.exec("n?", response_format=SCHEMA) == {"n": 2}


def test_subclass_overriding_call() -> None:
    class Mine(Runtime):
        def _call(
            self, content: list[dict[str, Any]], model: str = "default", response_format: Any = None
        ) -> Any:
            return f"sub: {content[-1]['text']}"

    assert Mine().exec("hi") == "sub: hi"


def test_no_provider_is_not_implemented() -> None:
    with pytest.raises(NotImplementedError):
        Runtime().exec("hi")


def test_system_blocks_and_media(tmp_path: Path) -> None:
    image = tmp_path / "shot.png"
    image.write_bytes(b"\x89PNG fake")
    model = ScriptedRuntime(["ok"])
    rt = Runtime(runtimes=model)
    rt.system = "Base."
    rt.exec(
        [
            {"type": "text", "text": "Extra rule.", "role": "system"},
            {"type": "text", "text": "Find the button."},
            {"type": "image", "path": str(image)},
        ]
    )
    req = model.requests[0]
    assert req.system_prompt == "Base.\n\nExtra rule."
    blocks = req.messages[0].content
    assert isinstance(blocks, list)
    assert blocks[0] == {"type": "text", "text": "Find the button."}
    assert blocks[1]["mime_type"] == "image/png"
    assert base64.b64decode(blocks[1]["data"]) == b"\x89PNG fake"
    assert len(blocks) == 2


def test_a_file_block_given_by_path_is_read_with_its_name(tmp_path: Path) -> None:
    report = tmp_path / "q3.pdf"
    report.write_bytes(b"%PDF-1.4")
    model = ScriptedRuntime(["ok"])
    Runtime(runtimes=model).exec([{"type": "file", "path": str(report)}])
    [block] = model.requests[0].messages[0].content
    assert isinstance(block, dict)
    assert (block["mime_type"], block["filename"]) == ("application/pdf", "q3.pdf")
    assert base64.b64decode(str(block["data"])) == b"%PDF-1.4"


def test_an_unknown_block_type_is_refused_not_dropped() -> None:
    model = ScriptedRuntime(["ok"])
    rt = Runtime(runtimes=model)
    with pytest.raises(ValueError, match="'hologram' cannot be sent"):
        rt.exec([{"type": "text", "text": "Look."}, {"type": "hologram", "data": "?"}])
    assert model.requests == []


def test_bad_content_is_a_type_error() -> None:
    rt = Runtime(runtimes=ScriptedRuntime(["x"]))
    with pytest.raises(TypeError):
        rt.exec(42)  # type: ignore[arg-type]


def test_model_override_goes_through_the_selector() -> None:
    picked: list[str] = []
    scripted = ScriptedRuntime(["from scripted"])

    class Selector:
        def select(self, model_ref: str) -> Any:
            picked.append(model_ref)
            return scripted if model_ref.startswith("scripted:") else TestRuntime()

    rt = Runtime(model="test", runtimes=Selector())
    assert rt.exec("hi").startswith("test reply")
    assert rt.exec("hi", model="scripted:x") == "from scripted"
    assert picked == ["test", "scripted:x"]
    assert scripted.requests[0].model_ref == "scripted:x"


def test_thinking_level_and_web_search_are_passed_through() -> None:
    model = ScriptedRuntime(["a", "b"])
    rt = Runtime(runtimes=model)
    rt.exec("x")
    assert "thinking_level" not in model.requests[0].kwargs
    rt.thinking_level = "high"
    rt.exec("x", web_search=True)
    assert model.requests[1].kwargs["thinking_level"] == "high"
    assert model.requests[1].kwargs["web_search"] is True
    assert model.requests[1].kwargs["session_id"] == rt.session_id


def test_close_and_context_manager() -> None:
    with Runtime(runtimes=ScriptedRuntime(["x"])) as rt:
        assert rt.exec("hi") == "x"
    with pytest.raises(RuntimeError, match="closed"):
        rt.exec("again")

    async def main() -> None:
        async with Runtime(runtimes=ScriptedRuntime(["y"])) as art:
            assert await art.async_exec("hi") == "y"
        with pytest.raises(RuntimeError):
            await art.async_exec("again")

    asyncio.run(main())


def test_sync_exec_from_inside_a_running_loop() -> None:
    rt = Runtime(runtimes=ScriptedRuntime(["inner"]))

    async def main() -> str:
        return str(rt.exec("hi"))

    assert asyncio.run(main()) == "inner"


def test_many_concurrent_async_execs(clock: FakeClock) -> None:
    rt = Runtime(model="test", runtimes=TestRuntime(), clock=clock.now, sleep=clock.sleep)

    async def main() -> list[Any]:
        return await asyncio.gather(*(rt.async_exec(f"q{i}") for i in range(200)))

    results = asyncio.run(main())
    assert results[7] == "test reply to: q7"


def test_default_selector_serves_the_test_model() -> None:
    with Runtime(model="test") as rt:
        assert rt.exec("hello") == "test reply to: hello"


def test_runtimes_and_call_are_exclusive() -> None:
    with pytest.raises(TypeError):
        Runtime(call=lambda c, m, r: "x", runtimes=ScriptedRuntime())
    with pytest.raises(TypeError):
        Runtime(runtimes=object())


def test_stream_fn_overrides_the_runtime_for_one_call() -> None:
    default = ScriptedRuntime(["default"])
    rt = Runtime(runtimes=default)
    assert rt.exec("x", stream_fn=ScriptedRuntime(["override"])) == "override"
    assert rt.exec("x", stream_fn=lambda c, m, r: "from a function") == "from a function"
    assert rt.exec("x") == "default"


def test_skills_are_listed_in_the_system_prompt(tmp_path: Path) -> None:
    skill = tmp_path / "pdf"
    skill.mkdir()
    (skill / "SKILL.md").write_text(
        "---\nname: pdf-tools\ndescription: Read & split PDFs\n---\nBody\n", encoding="utf-8"
    )
    model = ScriptedRuntime(["a"])
    Runtime(runtimes=model, skills=[str(tmp_path)]).exec("x")
    system = model.requests[0].system_prompt or ""
    assert "<available_skills>" in system
    assert "<name>pdf-tools</name>" in system
    assert "Read &amp; split PDFs" in system


def test_skill_fields_escape_markup_but_not_quotes(tmp_path: Path) -> None:
    skill = tmp_path / "q"
    skill.mkdir()
    (skill / "SKILL.md").write_text(
        "---\nname: <b>&co\ndescription: say \"hi\" > 'bye' now\n---\n", encoding="utf-8"
    )
    model = ScriptedRuntime(["a"])
    Runtime(runtimes=model, skills=[str(tmp_path)]).exec("x")
    system = model.requests[0].system_prompt or ""
    assert "<name>&lt;b&gt;&amp;co</name>" in system
    assert "<description>say \"hi\" &gt; 'bye' now</description>" in system


# --- the seed's names and signatures (issue 14, section 4) ---------------------------------


def test_async_exec_takes_the_seeds_positional_order() -> None:
    import inspect

    params = inspect.signature(Runtime.async_exec).parameters
    positional = [n for n, p in params.items() if p.kind is p.POSITIONAL_OR_KEYWORD]
    assert positional == [
        "self", "content", "context", "response_format", "model", "timeout_s", "on_retry",
        "tools", "toolset", "max_iterations",
    ]  # fmt: skip
    assert params["max_iterations"].default is None
    model = ScriptedRuntime(["x"])
    rt = Runtime(runtimes=model)
    # content, context, response_format, model, timeout_s, on_retry, tools, toolset
    assert asyncio.run(rt.async_exec("hi", None, None, "scripted:m", 30.0, None, [], "none")) == "x"
    assert model.requests[0].model_ref == "scripted:m"


def test_async_exec_puts_no_cap_on_the_tool_loop_and_exec_stops_at_20() -> None:
    from openprogram_yaml.errors import LLMError
    from openprogram_yaml.providers.test import Reply

    add = {"spec": {"name": "add"}, "execute": lambda: "1"}
    replies = [Reply.call("add") for _ in range(25)] + ["done"]
    rt = Runtime(runtimes=ScriptedRuntime(replies), tools=[add])
    assert asyncio.run(rt.async_exec("go")) == "done"
    rt = Runtime(runtimes=ScriptedRuntime(replies), tools=[add])
    with pytest.raises(LLMError, match="max_iterations=20"):
        rt.exec("go")


def test_an_unknown_provider_model_is_a_value_error_when_the_runtime_is_built() -> None:
    with pytest.raises(ValueError, match="no runtime serves model 'opena:gpt-4o'") as info:
        Runtime(model="opena:gpt-4o")
    assert "did you mean 'openai:gpt-4o'?" in str(info.value)
    Runtime(model="openai:gpt-4o").close()  # known: fine, and no request is made
    Runtime(model="host-model", call=lambda c, m, r: "x").close()  # any name with call=


def test_close_closes_the_selector_it_was_given() -> None:
    closed: list[str] = []

    class Selector:
        def select(self, model_ref: str) -> Any:
            return ScriptedRuntime(["x"])

        async def aclose(self) -> None:
            closed.append("closed")

    with Runtime(model="m:x", runtimes=Selector()) as rt:
        rt.exec("hi")
    assert closed == ["closed"]

    async def main() -> None:
        async with Runtime(model="m:x", runtimes=Selector()) as art:
            await art.async_exec("hi")

    asyncio.run(main())
    assert closed == ["closed", "closed"]


def test_a_call_function_says_registered_tools_are_not_offered() -> None:
    lookup = {"spec": {"name": "lookup"}, "execute": lambda: "A-17"}
    rt = Runtime(call=lambda c, m, r: "x", tools=[lookup])
    with pytest.warns(RuntimeWarning, match=r"call= function .* \(lookup\) are not offered"):
        assert rt.exec("hi") == "x"
    with pytest.raises(ValueError, match="cannot call tools"):
        rt.exec("hi", tools=[lookup])
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert rt.exec("hi", toolset="none") == "x"  # opting out says nothing


def test_web_search_with_a_call_function_is_refused_not_dropped() -> None:
    from openprogram_yaml.errors import UsageError

    calls: list[str] = []
    rt = Runtime(call=lambda c, m, r: calls.append(m) or "x")
    with pytest.raises(UsageError, match="web_search=True needs a provider runtime"):
        rt.exec("news?", web_search=True)
    assert calls == []
