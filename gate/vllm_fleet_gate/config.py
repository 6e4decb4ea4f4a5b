"""The gate's JSON config: parsing, defaults and validation.

An Ansible role writes the file; the gate reads it once at start. Every
mistake is collected (not just the first) and reported as one line per
problem, named by its path in the file, so ``--check-config`` can tell an
operator everything that is wrong in one go. Secret values are never echoed.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

TOKEN_COUNT_MODES = ("tokenize", "estimate")
# A hold longer than this is refused whatever max_hold_s says: a forgotten
# hold must not park clients for hours.
HOLD_CAP_S = 3600


class ConfigError(Exception):
    """The config is unusable; ``errors`` lists every problem found."""

    def __init__(self, errors: list[str]):
        super().__init__("; ".join(errors))
        self.errors = errors


@dataclass(frozen=True)
class UpstreamConfig:
    name: str
    url: str
    kv_cache_tokens: int
    max_model_len: int


@dataclass(frozen=True)
class Config:
    upstreams: tuple[UpstreamConfig, ...]
    admin_token: str
    listen_host: str = "127.0.0.1"
    listen_port: int = 8080
    api_keys: tuple[str, ...] = ()
    upstream_api_key: str | None = None
    queue_max_depth: int = 64
    queue_timeout_s: float = 600.0
    count_max_tokens: bool = True
    token_count_mode: str = "tokenize"
    chars_per_token: float = 4.0
    tokenize_timeout_s: float = 10.0
    health_interval_s: float = 2.0
    health_timeout_s: float = 2.0
    upstream_connect_timeout_s: float = 5.0
    upstream_read_timeout_s: float = 3600.0
    upstream_keepalive_s: float = 4.0
    upstream_max_connections: int = 1024
    max_hold_s: float = 600.0
    retry_after_s: int = 5
    shutdown_timeout_s: float = 60.0
    max_request_bytes: int = 100 * 1024 * 1024
    client_idle_timeout_s: float = 75.0
    client_body_timeout_s: float = 120.0
    client_write_timeout_s: float = 60.0


# Section -> {key: default}. A default of _REQUIRED marks a required key.
_REQUIRED = object()
_SCHEMA: dict[str, Any] = {
    # The timeouts bound what a slow or stalled client may hold: a connection
    # with no complete request (idle keep-alive, or headers trickling in), a
    # body still arriving, a stream it does not read.
    "listen": {"host": "127.0.0.1", "port": 8080, "idle_timeout_s": 75, "body_timeout_s": 120, "write_timeout_s": 60},
    "upstreams": _REQUIRED,
    "api_keys": None,
    "upstream_api_key": None,
    "admin_token": _REQUIRED,
    "queue": {"max_depth": 64, "timeout_s": 600},
    "count_max_tokens": True,
    "token_count": {"mode": "tokenize", "chars_per_token": 4, "timeout_s": 10},
    "health_check": {"interval_s": 2, "timeout_s": 2},
    # keepalive_s stays under vLLM's own idle keep-alive (5 s), so the gate
    # never sends a request on a connection the engine is closing.
    "upstream_timeouts": {"connect_s": 5, "read_s": 3600, "keepalive_s": 4},
    "upstream_max_connections": 1024,
    "max_hold_s": 600,
    "retry_after_s": 5,
    "shutdown_timeout_s": 60,
    "max_request_bytes": 100 * 1024 * 1024,
}
_UPSTREAM_KEYS = ("name", "url", "kv_cache_tokens", "max_model_len")
MIN_ADMIN_TOKEN_LEN = 16


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return {dict: "object", list: "list", str: "string"}.get(type(value), type(value).__name__)


def _shown(value: Any) -> str:
    """A non-secret value as the message shows it."""
    if isinstance(value, (dict, list)):
        return _type_name(value)
    if isinstance(value, bool) or value is None:
        return _type_name(value)
    return repr(value)


class _Checker:
    def __init__(self) -> None:
        self.errors: list[str] = []

    def fail(self, where: str, msg: str) -> None:
        self.errors.append(f"{where}: {msg}")

    def unknown_keys(self, where: str, got: dict, known) -> None:
        for key in got:
            if key not in known:
                self.fail(where, f"unknown key {key!r} (known: {', '.join(sorted(known))})")

    def integer(self, where: str, value: Any, *, minimum: int, maximum: int | None = None) -> int | None:
        ok = isinstance(value, int) and not isinstance(value, bool) and value >= minimum
        if ok and maximum is not None:
            ok = value <= maximum
        if not ok:
            if maximum is not None:
                self.fail(where, f"must be an integer from {minimum} to {maximum}, got {_shown(value)}")
            elif minimum == 1:
                self.fail(where, f"must be a positive integer, got {_shown(value)}")
            else:
                self.fail(where, f"must be an integer >= {minimum}, got {_shown(value)}")
            return None
        return value

    def positive(self, where: str, value: Any, *, maximum: float | None = None) -> float | None:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0
        if ok and maximum is not None:
            ok = value <= maximum
        if not ok:
            limit = f" no larger than {maximum:g}" if maximum is not None else ""
            self.fail(where, f"must be a positive number{limit}, got {_shown(value)}")
            return None
        return float(value)

    def string(self, where: str, value: Any) -> str | None:
        if not isinstance(value, str) or not value.strip():
            self.fail(where, f"must be a non-empty string, got {_shown(value)}")
            return None
        return value

    def secret(self, where: str, value: Any, *, min_len: int = 1) -> str | None:
        # Never echo the value: it is a credential.
        if not isinstance(value, str) or len(value) < min_len or value != value.strip():
            what = f"a string of at least {min_len} characters" if min_len > 1 else "a non-empty string"
            self.fail(where, f"must be {what} without surrounding spaces (value not shown)")
            return None
        return value


def _section(check: _Checker, raw: dict, name: str) -> dict:
    """A sub-object merged over its defaults; unknown keys reported."""
    defaults = _SCHEMA[name]
    value = raw.get(name)
    if value is None:
        return dict(defaults)
    if not isinstance(value, dict):
        check.fail(name, f"must be an object, got {_type_name(value)}")
        return dict(defaults)
    check.unknown_keys(name, value, defaults)
    return {**defaults, **value}


def _url(check: _Checker, where: str, value: Any) -> str | None:
    if not isinstance(value, str):
        check.fail(where, f"must be an http:// or https:// URL, got {_shown(value)}")
        return None
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
        check.fail(where, f"must be an http:// or https:// URL with a host and no query, got {value!r}")
        return None
    try:
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError:
        check.fail(where, f"has an invalid port: {value!r}")
        return None
    return value.rstrip("/")


def _upstreams(check: _Checker, raw: Any) -> tuple[UpstreamConfig, ...]:
    if raw is None:
        check.fail("upstreams", "required: list at least one engine")
        return ()
    if not isinstance(raw, list):
        check.fail("upstreams", f"must be a list of engines, got {_type_name(raw)}")
        return ()
    if not raw:
        check.fail("upstreams", "required: list at least one engine")
        return ()
    out = []
    seen: set[str] = set()
    for i, item in enumerate(raw):
        where = f"upstreams[{i}]"
        if not isinstance(item, dict):
            check.fail(where, f"must be an object, got {_type_name(item)}")
            continue
        check.unknown_keys(where, item, _UPSTREAM_KEYS)
        missing = [k for k in _UPSTREAM_KEYS if k not in item]
        for key in missing:
            check.fail(f"{where}.{key}", "required")
        name = check.string(f"{where}.name", item["name"]) if "name" in item else None
        if name is not None:
            if name in seen:
                check.fail(f"{where}.name", f"duplicate upstream name {name!r}")
            seen.add(name)
        url = _url(check, f"{where}.url", item["url"]) if "url" in item else None
        kv = (check.integer(f"{where}.kv_cache_tokens", item["kv_cache_tokens"], minimum=1)
              if "kv_cache_tokens" in item else None)
        mml = (check.integer(f"{where}.max_model_len", item["max_model_len"], minimum=1)
               if "max_model_len" in item else None)
        if None not in (name, url, kv, mml):
            out.append(UpstreamConfig(name=name, url=url, kv_cache_tokens=kv, max_model_len=mml))
    return tuple(out)


def parse_config(raw: Any) -> Config:
    """Validate a decoded JSON document and return the Config.

    Raises ConfigError listing every problem.
    """
    check = _Checker()
    if not isinstance(raw, dict):
        raise ConfigError([f"config: must be a JSON object, got {_type_name(raw)}"])
    check.unknown_keys("config", raw, _SCHEMA)
    # Section by section, in this order, so the errors come in it too.
    fields = _listen(check, raw)
    fields["upstreams"] = _upstreams(check, raw.get("upstreams"))
    for section in (_secrets, _queue, _token_count, _engine_timeouts, _limits):
        fields.update(section(check, raw))
    if check.errors:
        raise ConfigError(check.errors)
    return Config(**fields)


def _listen(check: _Checker, raw: dict) -> dict:
    listen = _section(check, raw, "listen")
    return {
        "listen_host": check.string("listen.host", listen["host"]),
        "listen_port": check.integer("listen.port", listen["port"], minimum=1, maximum=65535),
        "client_idle_timeout_s": check.positive("listen.idle_timeout_s", listen["idle_timeout_s"]),
        "client_body_timeout_s": check.positive("listen.body_timeout_s", listen["body_timeout_s"]),
        "client_write_timeout_s": check.positive("listen.write_timeout_s", listen["write_timeout_s"]),
    }


def _secrets(check: _Checker, raw: dict) -> dict:
    api_keys: tuple[str, ...] = ()
    keys = raw.get("api_keys")
    if keys is not None:
        if not isinstance(keys, list):
            check.fail("api_keys", f"must be a list of strings, got {_type_name(keys)}")
        else:
            good = [check.secret(f"api_keys[{i}]", k) for i, k in enumerate(keys)]
            api_keys = tuple(k for k in good if k is not None)

    upstream_api_key = raw.get("upstream_api_key")
    if upstream_api_key is not None:
        upstream_api_key = check.secret("upstream_api_key", upstream_api_key)

    admin_token = raw.get("admin_token")
    if admin_token is None:
        check.fail("admin_token", f"required: a secret of at least {MIN_ADMIN_TOKEN_LEN} characters for the admin API")
    else:
        admin_token = check.secret("admin_token", admin_token, min_len=MIN_ADMIN_TOKEN_LEN)
        if admin_token is not None and admin_token in api_keys:
            check.fail("admin_token", "must differ from every api_keys entry")
    return {"api_keys": api_keys, "upstream_api_key": upstream_api_key, "admin_token": admin_token}


def _queue(check: _Checker, raw: dict) -> dict:
    queue = _section(check, raw, "queue")
    fields = {
        "queue_max_depth": check.integer("queue.max_depth", queue["max_depth"], minimum=0),
        "queue_timeout_s": check.positive("queue.timeout_s", queue["timeout_s"]),
    }
    count_max_tokens = raw.get("count_max_tokens", True)
    if not isinstance(count_max_tokens, bool):
        check.fail("count_max_tokens", f"must be true or false, got {_shown(count_max_tokens)}")
    return {**fields, "count_max_tokens": count_max_tokens}


def _token_count(check: _Checker, raw: dict) -> dict:
    tc = _section(check, raw, "token_count")
    mode = tc["mode"]
    if mode not in TOKEN_COUNT_MODES:
        check.fail("token_count.mode", f"must be 'tokenize' or 'estimate', got {_shown(mode)}")
    return {
        "token_count_mode": mode,
        "chars_per_token": check.positive("token_count.chars_per_token", tc["chars_per_token"]),
        "tokenize_timeout_s": check.positive("token_count.timeout_s", tc["timeout_s"]),
    }


def _engine_timeouts(check: _Checker, raw: dict) -> dict:
    hc = _section(check, raw, "health_check")
    fields = {
        "health_interval_s": check.positive("health_check.interval_s", hc["interval_s"]),
        "health_timeout_s": check.positive("health_check.timeout_s", hc["timeout_s"]),
    }
    ut = _section(check, raw, "upstream_timeouts")
    return {
        **fields,
        "upstream_connect_timeout_s": check.positive("upstream_timeouts.connect_s", ut["connect_s"]),
        "upstream_read_timeout_s": check.positive("upstream_timeouts.read_s", ut["read_s"]),
        "upstream_keepalive_s": check.positive("upstream_timeouts.keepalive_s", ut["keepalive_s"]),
    }


def _limits(check: _Checker, raw: dict) -> dict:
    """The top-level numbers, each over its default."""
    def top(key, fn, **kw):
        return fn(key, raw.get(key, _SCHEMA[key]), **kw)

    return {
        "upstream_max_connections": top("upstream_max_connections", check.integer, minimum=1),
        "max_hold_s": top("max_hold_s", check.positive, maximum=HOLD_CAP_S),
        "retry_after_s": top("retry_after_s", check.integer, minimum=1),
        "shutdown_timeout_s": top("shutdown_timeout_s", check.positive),
        "max_request_bytes": top("max_request_bytes", check.integer, minimum=1024),
    }


def load_config(path: str) -> Config:
    """Read and validate the JSON config at ``path``."""
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        raise ConfigError([f"cannot read {path}: {exc.strerror or exc}"]) from None
    except UnicodeDecodeError:
        raise ConfigError([f"{path}: not UTF-8 text"]) from None
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError([f"{path}: not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"]) from None
    return parse_config(raw)
