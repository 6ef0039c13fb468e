"""The settings a ``Runtime`` reads from the environment (retries, the exec timeout) are
read the same way through its quick look (``_env_value``) as through ``os.environ``."""

from __future__ import annotations

import os
from typing import Any

import pytest

from openprogram_yaml.runtime import Runtime
from openprogram_yaml.runtime.retry import resolve_backoff_base, resolve_max_retries
from openprogram_yaml.runtime.runtime import _env_value

VALUES = [None, "", "  ", "3", " 4 ", "0", "-1", "2.5", "x", "ünïcode", "\udcff"]


@pytest.mark.parametrize("value", VALUES)
def test_the_quick_look_reads_what_os_environ_holds(
    monkeypatch: pytest.MonkeyPatch, value: str | None
) -> None:
    name = "OPENPROGRAM_TEST_SETTING"
    if value is None:
        monkeypatch.delenv(name, raising=False)
    else:
        monkeypatch.setenv(name, value)
    assert _env_value(name) == os.environ.get(name)


def _outcome(make: object) -> tuple[str, object]:
    try:
        return ("value", make())  # type: ignore[operator]
    except ValueError as exc:
        return ("error", str(exc))


@pytest.mark.parametrize("value", VALUES)
@pytest.mark.parametrize(
    ("name", "given", "read", "resolve"),
    [
        ("OPENPROGRAM_MAX_RETRIES", None, "max_retries", resolve_max_retries),
        ("OPENPROGRAM_MAX_RETRIES", 2, "max_retries", resolve_max_retries),
        ("OPENPROGRAM_RETRY_BACKOFF_BASE", None, "backoff_base_s", resolve_backoff_base),
        ("OPENPROGRAM_RETRY_BACKOFF_BASE", 0.5, "backoff_base_s", resolve_backoff_base),
    ],
)
def test_a_runtime_resolves_its_retry_settings_as_resolve_does(
    monkeypatch: pytest.MonkeyPatch,
    value: str | None,
    name: str,
    given: float | None,
    read: str,
    resolve: object,
) -> None:
    # Differential: the Runtime looks first and calls resolve_* only when the variable is
    # set; the outcome (value, or the error's words) is what resolve_* alone gives.
    if value is None:
        monkeypatch.delenv(name, raising=False)
    else:
        monkeypatch.setenv(name, value)
    kwargs: dict[str, Any] = {read: given}
    ours = _outcome(lambda: getattr(Runtime(call=lambda *a: "ok", **kwargs), read))
    assert ours == _outcome(lambda: resolve(given))  # type: ignore[operator]


def test_the_exec_timeout_setting_is_read_at_each_exec(monkeypatch: pytest.MonkeyPatch) -> None:
    runtime = Runtime(call=lambda *a: "ok")
    monkeypatch.delenv("OPENPROGRAM_EXEC_TIMEOUT_S", raising=False)
    assert runtime.exec("hi") == "ok"
    monkeypatch.setenv("OPENPROGRAM_EXEC_TIMEOUT_S", "not a number")
    with pytest.raises(ValueError):
        runtime.exec("hi")
    monkeypatch.setenv("OPENPROGRAM_EXEC_TIMEOUT_S", " 30 ")
    assert runtime.exec("hi") == "ok"
    runtime.close()
