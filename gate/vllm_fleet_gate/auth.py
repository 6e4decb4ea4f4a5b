"""Who may call what: a client's API key on the proxied routes, the admin
token on /admin/*. Every comparison is constant-time (hmac.compare_digest)."""
from __future__ import annotations

import hmac

from aiohttp import web

from .errors import error_response


def bearer(request: web.Request) -> bytes | None:
    value = request.headers.get("Authorization")
    if not value:
        return None
    scheme, _, token = value.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return None
    # aiohttp keeps bytes that are not UTF-8 as surrogates: these give them
    # back, so any bytes compare (and match no key) rather than raise.
    return token.encode("utf-8", "surrogateescape")


def check_api_key(request: web.Request, api_keys: list[bytes]) -> web.Response | None:
    """None when the request may pass (or no keys are set), else the 401."""
    if not api_keys:
        return None
    token = bearer(request)
    if token is None:
        return error_response(401, "Missing API key: send Authorization: Bearer <key>.", "missing_api_key")
    # Compare against every key, so timing does not tell which matched.
    matched = False
    for key in api_keys:
        matched |= hmac.compare_digest(token, key)
    if not matched:
        return error_response(401, "Invalid API key.", "invalid_api_key")
    return None


def check_admin_token(request: web.Request, admin_token: bytes) -> web.Response | None:
    """None when the request carries the admin token, else the 401 (none
    sent) or 403 (a wrong one)."""
    token = bearer(request)
    if token is None:
        return error_response(401, "The admin API needs Authorization: Bearer <admin_token>.",
                              "missing_admin_token")
    if not hmac.compare_digest(token, admin_token):
        return error_response(403, "Invalid admin token.", "invalid_admin_token")
    return None
