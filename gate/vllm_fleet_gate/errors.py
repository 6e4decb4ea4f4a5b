"""The answers the gate gives itself, in OpenAI's error shape: the one
error body, and the status of a client that went away."""
from __future__ import annotations

from aiohttp import web

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    408: "invalid_request_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
    502: "upstream_error",
    503: "service_unavailable",
    504: "upstream_error",
}
# The status a client that went away is logged with (as nginx does).
CLIENT_CLOSED = 499


def error_response(status: int, message: str, code: str, *, retry_after: int | None = None,
                   headers: dict | None = None, close: bool = False) -> web.Response:
    """An OpenAI-style error body. ``close``: end the connection after it
    (a body the gate stopped reading is still arriving)."""
    body = {"error": {"message": message, "type": _ERROR_TYPES.get(status, "error"), "param": None, "code": code}}
    if retry_after:
        headers = {**(headers or {}), "Retry-After": str(retry_after)}
    resp = web.json_response(body, status=status, headers=headers)
    if close:
        resp.force_close()
    return resp


def sentence(text: str) -> str:
    return text[:1].upper() + text[1:]
