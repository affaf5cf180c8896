"""Who may call emulate's admin API (``/admin/*``), and what one call may carry.

The admin API scales a fleet that stands for GPUs, so it is off unless asked
for (``--admin-api``), and when on, a request passes only if:

1. it is not cross-site: an ``Origin`` header, when present, is the front
   door's own (127.0.0.1, localhost, [::1] or the bound host, on its port), and
   ``Sec-Fetch-Site``, when present, is ``same-origin`` or ``none``. A page in a
   browser on the same machine could otherwise reach 127.0.0.1; its requests
   carry these headers, command-line clients and Prometheus send neither. -> 403
2. it carries ``Authorization: Bearer <token>`` with the configured token,
   compared in constant time (both sides hashed first, so not even the length
   leaks). -> 401
3. a request with a body says ``Content-Type: application/json``: text/plain,
   form and multipart bodies are what a browser may send cross-site without a
   CORS preflight, so they are refused outright. -> 415
4. its body is at most :data:`MAX_BODY_BYTES` (a scale call is ~50 bytes). -> 413

Checks run in that order, so a foreign page learns nothing about the token.
What one scale call may do is bounded where it is parsed (server.py).
"""

from __future__ import annotations

import hashlib
import hmac

from aiohttp import web

from llmscale.emulate.openai_api import ApiError

__all__ = ["MAX_BODY_BYTES", "admin_refusal", "allowed_origins", "read_admin_body"]

#: Largest admin request body accepted, bytes: ``{"replicas": 512, "drain_until_idle": false}`` is 45.
MAX_BODY_BYTES = 1024

_SAME_SITE = frozenset({"same-origin", "none"})


def allowed_origins(host: str, port: int) -> frozenset[str]:
    """The front door's own origins: the bound host and the loopback names, on its port."""
    names = {"127.0.0.1", "localhost", "[::1]", f"[{host}]" if ":" in host else host}
    return frozenset(f"http://{name}:{port}" for name in names)


def _digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode("utf-8", "replace")).digest()


def admin_refusal(request: web.Request, *, token: str, origins: frozenset[str]) -> ApiError | None:
    """Why ``request`` may not use the admin API (None: it may). See the module docstring."""
    origin = request.headers.get("Origin")
    if origin is not None and origin not in origins:
        return ApiError(403, f"cross-site request refused (Origin {origin})", "PermissionDeniedError")
    site = request.headers.get("Sec-Fetch-Site")
    if site is not None and site not in _SAME_SITE:
        return ApiError(403, f"cross-site request refused (Sec-Fetch-Site {site})", "PermissionDeniedError")
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not given.strip():
        return ApiError(401, "the admin API needs Authorization: Bearer <token>", "AuthenticationError")
    if not hmac.compare_digest(_digest(given.strip()), _digest(token)):
        return ApiError(401, "the admin API token is not valid", "AuthenticationError")
    if request.method not in ("GET", "HEAD") and request.content_type != "application/json":
        return ApiError(
            415,
            f"Content-Type {request.content_type!r}: the admin API takes application/json",
            "BadRequestError",
        )
    length = request.content_length
    if length is not None and length > MAX_BODY_BYTES:
        return ApiError(413, f"body of {length} bytes, at most {MAX_BODY_BYTES}", "BadRequestError")
    return None


async def read_admin_body(request: web.Request) -> bytes:
    """The body, read to at most MAX_BODY_BYTES (a chunked body has no Content-Length to check)."""
    buf = bytearray()
    while len(buf) <= MAX_BODY_BYTES:
        chunk = await request.content.read(MAX_BODY_BYTES + 1 - len(buf))
        if not chunk:
            return bytes(buf)
        buf += chunk
    raise ApiError(413, f"body larger than {MAX_BODY_BYTES} bytes", "BadRequestError")
