"""The built-in runtimes, each speaking one wire format: ``openai`` (Chat Completions and
compatible servers), ``anthropic`` (Messages) and ``test`` (offline, deterministic, with the
public fakes ``TestRuntime`` and ``ScriptedRuntime``).

``_http`` holds the turn every HTTP provider shares and ``http_client`` the one production
HTTP client. Providers register through the same entry points a plugin uses and know
nothing of YAML.
"""
