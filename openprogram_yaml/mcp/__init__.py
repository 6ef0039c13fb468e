"""A prompt repository served over MCP (``openprogram-run mcp PATH``): each method a tool,
each method's prompt a prompt, reloaded as the files change. Built on the official ``mcp``
SDK, which only this package imports (and only when ``mcp`` runs, so start-up never pays
for it)."""
