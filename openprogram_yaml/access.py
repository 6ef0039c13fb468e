"""Who may call a server this package starts: the loopback rule and the bearer token.

Shared by the front ends that listen on a port (``serve``, ``mcp --http``), which are
siblings and may not import each other. Bound to loopback, a server needs no token; bound to
any other address it refuses to start without one (``--token`` or ``OPENPROGRAM_SERVE_TOKEN``,
which other users cannot read in the process list), and every request must show it.
"""

from __future__ import annotations

import hmac
import ipaddress
import os

__all__ = [
    "LOOPBACK_NAMES",
    "TOKEN_ENV",
    "is_loopback",
    "is_same_origin",
    "server_token",
    "token_matches",
    "token_problem",
]

#: The environment variable that may hold the token instead of ``--token``.
TOKEN_ENV = "OPENPROGRAM_SERVE_TOKEN"

#: The names a loopback-bound server answers to (with its port) in ``Host`` and ``Origin``.
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")


def is_loopback(host: str) -> bool:
    """Whether binding to ``host`` keeps the server on this machine."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def is_same_origin(origin: str, host: str) -> bool:
    """Whether the ``Origin`` a browser sent names the ``Host`` it called (http or https):
    the rule beyond loopback, where any host name may be served but a page of another site
    may not call it."""
    scheme, sep, rest = origin.partition("://")
    if not sep or scheme.lower() not in ("http", "https"):
        return False
    return rest.lower() == host.lower()


def token_matches(sent: str | None, token: str) -> bool:
    """Whether ``sent`` is ``token``, compared in constant time (no timing hints).

    ``sent`` comes from a client: a header that is not UTF-8 arrives with surrogates in
    it, which are encoded as they are (a mismatch, not an error)."""
    if sent is None:
        return False
    return hmac.compare_digest(sent.encode("utf-8", "surrogatepass"), token.encode("utf-8"))


def token_problem(host: str, token: str | None) -> str | None:
    """Why a server must not start on ``host`` with ``token``, or None."""
    if token is not None and not token.strip():
        return f"error: the token is empty; give a long random one (--token or ${TOKEN_ENV})"
    if token is not None and not (token.isascii() and token.isprintable()):
        # A header carries ASCII: clients and servers decode other bytes differently, and
        # a value that is not UTF-8 (from the environment) cannot be compared at all.
        return (
            "error: the token must be ASCII letters, digits and punctuation (it is sent in an "
            f"HTTP header); give another one (--token or ${TOKEN_ENV})"
        )
    if token is None and not is_loopback(host):
        return (
            f"error: --host {host} lets other machines call this server, so it needs a token: "
            f"pass --token TOKEN or set {TOKEN_ENV} (clients send 'Authorization: Bearer "
            "TOKEN'), or leave --host at 127.0.0.1"
        )
    return None


def server_token(host: str, given: str | None) -> tuple[str | None, str | None]:
    """The token a server on ``host`` requires (``given``, else ``$OPENPROGRAM_SERVE_TOKEN``;
    None: none) and why it must not start (None: it may)."""
    token = given if given is not None else os.environ.get(TOKEN_ENV) or None
    return token, token_problem(host, token)
