"""openprogram_yaml: LLM agents written as YAML files, checked, run and kept in git.

The public API is what ``__all__`` lists. Names load on first use, so ``import
openprogram_yaml`` (and the command line's start-up) stays fast.
"""

from __future__ import annotations

from ._lazy import lazy_exports
from ._version import __version__ as __version__

# Not from `typing`: importing it costs start-up time; mypy reads TYPE_CHECKING by name.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from .compile.program import Agent, Method, Program
    from .compile.project import compile_agent_files, compile_path
    from .errors import (
        AskTimeout,
        BudgetExceededError,
        ConfigError,
        DecisionError,
        Diagnostic,
        ErrorReason,
        InputValidationError,
        LLMError,
        OpenProgramError,
        StructuredOutputError,
        StructuredOutputGenerationError,
        StructuredOutputSchemaError,
        StructuredOutputUnsupportedError,
        StructuredOutputValidationError,
        ToolError,
        UsageError,
        UserDeclined,
    )
    from .providers.test import FakeClock, Reply, ScriptedRuntime, TestRuntime
    from .run.batch.engine import RowResult, run_batch
    from .runtime import (
        JsonSchemaOutput,
        RetryInfo,
        Runtime,
        SessionTrace,
        ToolsetPreset,
        TraceNode,
    )
    from .runtimes.protocol import (
        AgentRuntimeProtocol,
        Capabilities,
        Message,
        RuntimeConfig,
        RuntimeDelta,
        RuntimeRegistryEntry,
        RuntimeResult,
        ToolCall,
        ToolSpec,
        TurnFailure,
        Usage,
    )
    from .runtimes.registry import (
        RuntimeRegistry,
        add_runtime_alias,
        is_runtime_available,
        list_runtimes,
        register_runtime,
        resolve_runtime,
        unregister_runtime,
    )
    from .runtimes.rules import ProviderConfig, RuntimeRule
    from .runtimes.select import RuntimeSelector

_EXPORTS: dict[str, str] = {
    # compile
    "Agent": "compile.program",
    "Method": "compile.program",
    "Program": "compile.program",
    "compile_agent_files": "compile.project",
    "compile_path": "compile.project",
    # errors
    "AskTimeout": "errors",
    "BudgetExceededError": "errors",
    "ConfigError": "errors",
    "DecisionError": "errors",
    "Diagnostic": "errors",
    "ErrorReason": "errors",
    "InputValidationError": "errors",
    "LLMError": "errors",
    "OpenProgramError": "errors",
    "StructuredOutputError": "errors",
    "StructuredOutputGenerationError": "errors",
    "StructuredOutputSchemaError": "errors",
    "StructuredOutputUnsupportedError": "errors",
    "StructuredOutputValidationError": "errors",
    "ToolError": "errors",
    "UsageError": "errors",
    "UserDeclined": "errors",
    # runtime
    "JsonSchemaOutput": "runtime",
    "RetryInfo": "runtime",
    "Runtime": "runtime",
    "SessionTrace": "runtime",
    "ToolsetPreset": "runtime",
    "TraceNode": "runtime",
    # runtimes: protocol, registry, selection
    "AgentRuntimeProtocol": "runtimes.protocol",
    "Capabilities": "runtimes.protocol",
    "Message": "runtimes.protocol",
    "RuntimeConfig": "runtimes.protocol",
    "RuntimeDelta": "runtimes.protocol",
    "RuntimeRegistryEntry": "runtimes.protocol",
    "RuntimeResult": "runtimes.protocol",
    "ToolCall": "runtimes.protocol",
    "ToolSpec": "runtimes.protocol",
    "TurnFailure": "runtimes.protocol",
    "Usage": "runtimes.protocol",
    "RuntimeRegistry": "runtimes.registry",
    "add_runtime_alias": "runtimes.registry",
    "is_runtime_available": "runtimes.registry",
    "list_runtimes": "runtimes.registry",
    "register_runtime": "runtimes.registry",
    "resolve_runtime": "runtimes.registry",
    "unregister_runtime": "runtimes.registry",
    "ProviderConfig": "runtimes.rules",
    "RuntimeRule": "runtimes.rules",
    "RuntimeSelector": "runtimes.select",
    # batch runs
    "RowResult": "run.batch.engine",
    "run_batch": "run.batch.engine",
    # public test doubles
    "FakeClock": "providers.test",
    "Reply": "providers.test",
    "ScriptedRuntime": "providers.test",
    "TestRuntime": "providers.test",
}

__all__ = [
    "Agent",
    "AgentRuntimeProtocol",
    "AskTimeout",
    "BudgetExceededError",
    "Capabilities",
    "ConfigError",
    "DecisionError",
    "Diagnostic",
    "ErrorReason",
    "FakeClock",
    "InputValidationError",
    "JsonSchemaOutput",
    "LLMError",
    "Message",
    "Method",
    "OpenProgramError",
    "Program",
    "ProviderConfig",
    "Reply",
    "RetryInfo",
    "RowResult",
    "Runtime",
    "RuntimeConfig",
    "RuntimeDelta",
    "RuntimeRegistry",
    "RuntimeRegistryEntry",
    "RuntimeResult",
    "RuntimeRule",
    "RuntimeSelector",
    "ScriptedRuntime",
    "SessionTrace",
    "StructuredOutputError",
    "StructuredOutputGenerationError",
    "StructuredOutputSchemaError",
    "StructuredOutputUnsupportedError",
    "StructuredOutputValidationError",
    "TestRuntime",
    "ToolCall",
    "ToolError",
    "ToolSpec",
    "ToolsetPreset",
    "TraceNode",
    "TurnFailure",
    "Usage",
    "UsageError",
    "UserDeclined",
    "add_runtime_alias",
    "compile_agent_files",
    "compile_path",
    "is_runtime_available",
    "list_runtimes",
    "register_runtime",
    "resolve_runtime",
    "run_batch",
    "unregister_runtime",
]

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
