"""The streamable HTTP app of ``mcp --http``: the SDK's app behind the token rule.

The SDK's ``streamable_http_app`` serves the protocol (both eras, sessions, SSE) and checks
``Host`` and ``Origin`` against DNS rebinding (``TransportSecuritySettings``). ``TokenGuard``
in front of it adds what ``serve`` does beyond loopback: every request shows the bearer
token (constant-time compare; 401 with ``WWW-Authenticate`` otherwise), and since other
machines may call it by any name, the ``Host`` check is lifted and an ``Origin``, when sent,
must be the ``Host`` itself (a page of another site cannot call it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mcp.server.transport_security import TransportSecuritySettings
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from ..access import LOOPBACK_NAMES, is_loopback, is_same_origin, token_matches

if TYPE_CHECKING:
    from .server import RepositoryServer

__all__ = ["TokenGuard", "http_app", "transport_security"]


def transport_security(host: str, port: int) -> TransportSecuritySettings:
    """The SDK's Host/Origin check: on loopback, only this server's loopback names at
    ``port``; beyond loopback none (the token guards it, see ``TokenGuard``)."""
    if not is_loopback(host):
        return TransportSecuritySettings(enable_dns_rebinding_protection=False)
    bound = f"[{host}]" if ":" in host else host
    names = dict.fromkeys([*LOOPBACK_NAMES, bound.lower()])
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[f"{name}:{port}" for name in names],
        allowed_origins=[f"http://{name}:{port}" for name in names],
    )


class TokenGuard:
    """Refuses requests without the token, and cross-site ones beyond loopback."""

    def __init__(self, app: ASGIApp, token: str | None, *, any_host: bool) -> None:
        self.app = app
        self.token = token
        self.any_host = any_host

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        refusal = self._refusal(headers)
        if refusal is None:
            await self.app(scope, receive, send)
            return
        status, message = refusal
        extra = {"WWW-Authenticate": 'Bearer realm="openprogram"'} if status == 401 else None
        await JSONResponse({"error": message}, status_code=status, headers=extra)(
            scope, receive, send
        )

    def _refusal(self, headers: dict[str, str]) -> tuple[int, str] | None:
        origin = headers.get("origin")
        if (
            self.any_host
            and origin is not None
            and not is_same_origin(origin, headers.get("host", ""))
        ):
            return 403, "refused: a request from a page of another site"
        if self.token is None:
            return None
        scheme, _, sent = headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer" and token_matches(sent.strip(), self.token):
            return None
        return 401, "this server needs its token: send 'Authorization: Bearer <token>'"


def http_app(repo: RepositoryServer, host: str, port: int, token: str | None) -> ASGIApp:
    """The ASGI app serving ``repo`` at ``/mcp``."""
    app = repo.server.streamable_http_app(
        streamable_http_path="/mcp",
        transport_security=transport_security(host, port),
        host=host,
    )
    return TokenGuard(app, token, any_host=not is_loopback(host))
