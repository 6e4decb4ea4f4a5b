"""The endpoint file that the toolkit writes on consumer hosts, as the session client reads it.

Part of session_client.py (standard library only; it lies beside it on the lab hosts).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit

from session_log import short_error


class EndpointError(Exception):
    """The endpoint file is missing, unreadable or lacks OPENAI_BASE_URL."""


@dataclass(frozen=True)
class Endpoint:
    """What one read of the endpoint file says."""

    base_url: str
    mode: str | None = None
    model: str | None = None
    api_key: str | None = field(default=None, repr=False)


def parse_env(text: str) -> dict[str, str]:
    """Parse KEY=VALUE lines as systemd's EnvironmentFile does, roughly.

    Blank lines and ``#`` comments are skipped, an ``export`` prefix is
    allowed, and one pair of matching quotes around a value is removed.
    """
    values: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("export "):
            line = line[len("export "):].lstrip()
        key, sep, value = line.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key:
            continue
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        values[key] = value
    return values


def read_endpoint(path: str) -> Endpoint:
    """Read the endpoint file now; raise EndpointError when it is unusable."""
    try:
        with open(path, encoding="utf-8") as fh:
            values = parse_env(fh.read())
    except FileNotFoundError:
        raise EndpointError(f"endpoint file {path} is missing") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise EndpointError(f"endpoint file {path} is unreadable: {short_error(exc)}") from None
    base_url = values.get("OPENAI_BASE_URL", "").rstrip("/")
    if not base_url:
        raise EndpointError(f"endpoint file {path} has no OPENAI_BASE_URL")
    if urlsplit(base_url).scheme not in ("http", "https"):
        raise EndpointError(f"endpoint file {path}: OPENAI_BASE_URL is not an http(s) URL")
    return Endpoint(
        base_url=base_url,
        mode=values.get("VLLM_FLEET_MODE") or None,
        model=values.get("OPENAI_MODEL") or None,
        api_key=values.get("OPENAI_API_KEY") or None,
    )


def public_url(url: str) -> str:
    """The URL without any user:password, fit for a log."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))
