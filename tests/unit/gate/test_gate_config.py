"""Config validation: every mistake reported with its path and an exact
message; secrets never echoed; the CLI exits non-zero with no traceback."""
from __future__ import annotations

import copy
import json

import pytest
from gate_helpers import ADMIN

from vllm_fleet_gate.__main__ import main
from vllm_fleet_gate.config import Config, ConfigError, load_config, parse_config

GOOD = {
    "upstreams": [{"name": "e1", "url": "http://10.0.0.1:8000", "kv_cache_tokens": 2420352, "max_model_len": 1048576}],
    "admin_token": ADMIN,
}


def with_(**changes) -> dict:
    raw = copy.deepcopy(GOOD)
    for key, value in changes.items():
        if value is _DROP:
            raw.pop(key, None)
        else:
            raw[key] = value
    return raw


_DROP = object()


def up(**changes) -> list:
    item = {**GOOD["upstreams"][0], **changes}
    return [{k: v for k, v in item.items() if v is not _DROP}]


def test_minimal_config_gets_the_defaults():
    cfg = parse_config(GOOD)
    assert cfg.upstreams[0].url == "http://10.0.0.1:8000"
    assert (cfg.listen_host, cfg.listen_port) == ("127.0.0.1", 8080)
    assert (cfg.queue_max_depth, cfg.queue_timeout_s) == (64, 600.0)
    assert (cfg.token_count_mode, cfg.chars_per_token, cfg.count_max_tokens) == ("tokenize", 4.0, True)
    assert (cfg.api_keys, cfg.upstream_api_key) == ((), None)
    assert (cfg.max_hold_s, cfg.shutdown_timeout_s, cfg.retry_after_s) == (600.0, 60.0, 5)
    assert cfg.upstream_keepalive_s == 4.0  # under vLLM's 5 s idle keep-alive
    assert cfg == Config(upstreams=cfg.upstreams, admin_token=ADMIN)


def test_full_config():
    raw = with_(
        listen={"host": "0.0.0.0", "port": 9000},
        upstreams=up(url="http://h:8000/") + [
            {"name": "e2", "url": "https://h2:8000", "kv_cache_tokens": 10, "max_model_len": 10}
        ],
        api_keys=["k1", "k2"],
        upstream_api_key="up-key",
        queue={"max_depth": 0, "timeout_s": 0.5},
        count_max_tokens=False,
        token_count={"mode": "estimate", "chars_per_token": 3.5, "timeout_s": 1},
        health_check={"interval_s": 1, "timeout_s": 0.5},
        upstream_timeouts={"connect_s": 1, "read_s": 60, "keepalive_s": 2},
        upstream_max_connections=10,
        max_hold_s=120,
        retry_after_s=3,
        shutdown_timeout_s=5,
        max_request_bytes=2048,
    )
    cfg = parse_config(raw)
    assert [u.url for u in cfg.upstreams] == ["http://h:8000", "https://h2:8000"]
    assert cfg.api_keys == ("k1", "k2") and cfg.upstream_api_key == "up-key"
    assert (cfg.queue_max_depth, cfg.queue_timeout_s, cfg.count_max_tokens) == (0, 0.5, False)
    assert (cfg.token_count_mode, cfg.chars_per_token) == ("estimate", 3.5)
    assert (cfg.listen_host, cfg.listen_port, cfg.max_hold_s, cfg.max_request_bytes) == ("0.0.0.0", 9000, 120.0, 2048)
    assert (cfg.upstream_connect_timeout_s, cfg.upstream_read_timeout_s, cfg.upstream_keepalive_s) == (1, 60, 2)


def test_empty_api_keys_means_no_auth():
    assert parse_config(with_(api_keys=[])).api_keys == ()


@pytest.mark.parametrize(
    "raw, errors",
    [
        ([], ["config: must be a JSON object, got list"]),
        (with_(upstreams=_DROP), ["upstreams: required: list at least one engine"]),
        (with_(upstreams=[]), ["upstreams: required: list at least one engine"]),
        (with_(upstreams={"e1": {}}), ["upstreams: must be a list of engines, got object"]),
        (with_(admin_token=_DROP), ["admin_token: required: a secret of at least 16 characters for the admin API"]),
        (with_(admin_token="short"),
         ["admin_token: must be a string of at least 16 characters without surrounding spaces (value not shown)"]),
        (with_(bogus=1), [
            "config: unknown key 'bogus' (known: admin_token, api_keys, count_max_tokens, health_check, listen, "
            "max_hold_s, max_request_bytes, queue, retry_after_s, shutdown_timeout_s, token_count, "
            "upstream_api_key, upstream_max_connections, upstream_timeouts, upstreams)"
        ]),
        (with_(queue={"max_deph": 3}), ["queue: unknown key 'max_deph' (known: max_depth, timeout_s)"]),
        (with_(queue=[1]), ["queue: must be an object, got list"]),
        (with_(upstreams=up(kv_cache_tokens=0)), ["upstreams[0].kv_cache_tokens: must be a positive integer, got 0"]),
        (with_(upstreams=up(kv_cache_tokens=-5)), ["upstreams[0].kv_cache_tokens: must be a positive integer, got -5"]),
        (with_(upstreams=up(kv_cache_tokens="2,420,352")),
         ["upstreams[0].kv_cache_tokens: must be a positive integer, got '2,420,352'"]),
        (with_(upstreams=up(kv_cache_tokens=1.5)),
         ["upstreams[0].kv_cache_tokens: must be a positive integer, got 1.5"]),
        (with_(upstreams=up(max_model_len=True)), ["upstreams[0].max_model_len: must be a positive integer, got true"]),
        (with_(upstreams=up(max_model_len=_DROP, extra=1)), [
            "upstreams[0]: unknown key 'extra' (known: kv_cache_tokens, max_model_len, name, url)",
            "upstreams[0].max_model_len: required",
        ]),
        (with_(upstreams=up(url="10.0.0.1:8000")),
         ["upstreams[0].url: must be an http:// or https:// URL with a host and no query, got '10.0.0.1:8000'"]),
        (with_(upstreams=up(url="http://h:99999")), ["upstreams[0].url: has an invalid port: 'http://h:99999'"]),
        (with_(upstreams=up(name="")), ["upstreams[0].name: must be a non-empty string, got ''"]),
        (with_(upstreams=up() + up()), ["upstreams[1].name: duplicate upstream name 'e1'"]),
        (with_(upstreams=["e1"]), ["upstreams[0]: must be an object, got string"]),
        (with_(listen={"port": 0}), ["listen.port: must be an integer from 1 to 65535, got 0"]),
        (with_(queue={"max_depth": -1}), ["queue.max_depth: must be an integer >= 0, got -1"]),
        (with_(queue={"timeout_s": 0}), ["queue.timeout_s: must be a positive number, got 0"]),
        (with_(count_max_tokens="yes"), ["count_max_tokens: must be true or false, got 'yes'"]),
        (with_(token_count={"mode": "exact"}), ["token_count.mode: must be 'tokenize' or 'estimate', got 'exact'"]),
        (with_(token_count={"chars_per_token": 0}), ["token_count.chars_per_token: must be a positive number, got 0"]),
        (with_(upstream_timeouts={"keepalive_s": 0}),
         ["upstream_timeouts.keepalive_s: must be a positive number, got 0"]),
        (with_(max_hold_s=7200), ["max_hold_s: must be a positive number no larger than 3600, got 7200"]),
        (with_(api_keys="k"), ["api_keys: must be a list of strings, got string"]),
        (with_(api_keys=["ok", ""]),
         ["api_keys[1]: must be a non-empty string without surrounding spaces (value not shown)"]),
        (with_(api_keys=[ADMIN]), ["admin_token: must differ from every api_keys entry"]),
        (with_(upstream_api_key=5),
         ["upstream_api_key: must be a non-empty string without surrounding spaces (value not shown)"]),
        (with_(retry_after_s=0.5), ["retry_after_s: must be a positive integer, got 0.5"]),
    ],
)
def test_invalid_configs(raw, errors):
    with pytest.raises(ConfigError) as exc:
        parse_config(raw)
    assert exc.value.errors == errors


def test_every_problem_is_reported_at_once():
    raw = with_(upstreams=up(kv_cache_tokens=0, url="x"), queue={"timeout_s": -1}, admin_token=_DROP)
    with pytest.raises(ConfigError) as exc:
        parse_config(raw)
    assert exc.value.errors == [
        "upstreams[0].url: must be an http:// or https:// URL with a host and no query, got 'x'",
        "upstreams[0].kv_cache_tokens: must be a positive integer, got 0",
        "admin_token: required: a secret of at least 16 characters for the admin API",
        "queue.timeout_s: must be a positive number, got -1",
    ]


def test_secrets_are_never_echoed():
    raw = with_(admin_token="tiny-secret", api_keys=[" spaced-secret "])
    with pytest.raises(ConfigError) as exc:
        parse_config(raw)
    text = "\n".join(exc.value.errors)
    assert "tiny-secret" not in text and "spaced-secret" not in text


def test_load_config_file_errors(tmp_path):
    missing = tmp_path / "nope.json"
    with pytest.raises(ConfigError) as exc:
        load_config(str(missing))
    assert exc.value.errors == [f"cannot read {missing}: No such file or directory"]
    bad = tmp_path / "bad.json"
    bad.write_text('{"upstreams": [}\n')
    with pytest.raises(ConfigError) as exc:
        load_config(str(bad))
    assert exc.value.errors == [f"{bad}: not valid JSON: Expecting value at line 1 column 16"]


# -- the CLI ------------------------------------------------------------------
def test_check_config_ok(tmp_path, capsys):
    path = tmp_path / "gate.json"
    path.write_text(json.dumps(GOOD))
    assert main(["--config", str(path), "--check-config"]) == 0
    assert capsys.readouterr().out == f"{path}: OK: listen 127.0.0.1:8080, 1 upstream(s): e1\n"


def test_check_config_reads_the_environment(tmp_path, capsys, monkeypatch):
    path = tmp_path / "gate.json"
    path.write_text(json.dumps(GOOD))
    monkeypatch.setenv("VLLM_FLEET_GATE_CONFIG", str(path))
    assert main(["--check-config"]) == 0


def test_bad_config_exits_2_with_the_list_and_no_traceback(tmp_path, capsys):
    path = tmp_path / "gate.json"
    path.write_text(json.dumps(with_(upstreams=up(kv_cache_tokens=0), admin_token="short")))
    assert main(["--config", str(path), "--check-config"]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"vllm-fleet-gate: invalid config {path}:\n"
        "  - upstreams[0].kv_cache_tokens: must be a positive integer, got 0\n"
        "  - admin_token: must be a string of at least 16 characters without surrounding spaces (value not shown)\n"
    )
    assert "Traceback" not in err and "short" not in err


def test_bad_config_also_stops_a_real_start(tmp_path, capsys):
    path = tmp_path / "gate.json"
    path.write_text("{}")
    assert main(["--config", str(path)]) == 2
    assert "upstreams: required" in capsys.readouterr().err


def test_no_config_is_a_usage_error(capsys, monkeypatch):
    monkeypatch.delenv("VLLM_FLEET_GATE_CONFIG", raising=False)
    with pytest.raises(SystemExit) as exc:
        main([])
    assert exc.value.code == 2
    assert "--config FILE is required (or set VLLM_FLEET_GATE_CONFIG)" in capsys.readouterr().err
