"""The gate's OpenAPI spec (gate/vllm_fleet_gate/openapi.json): one file,
held to the code. It names exactly the routes the app registers, says who
needs which key, lists every error code the gate answers with, is valid
OpenAPI 3.0, and travels in the editable install and in the role's wheel;
the gate serves it at GET /openapi.json with no key."""
from __future__ import annotations

import ast
import json
import re
import shutil
import zipfile

import pytest
from gate_helpers import ADMIN, GATE_DIR, assert_gate_error, base_config, completion
from jsonschema import Draft4Validator
from schemathesis.specs.openapi.definitions import OPENAPI_30
from test_gate_install import VERSION, run

from vllm_fleet_gate import __version__
from vllm_fleet_gate.app import SPEC_FILE, Gate, spec_bytes
from vllm_fleet_gate.config import parse_config
from vllm_fleet_gate.errors import _ERROR_TYPES
from vllm_fleet_gate.generation import GENERATION_ROUTES
from vllm_fleet_gate.proxy import _OWN_PATHS

SPEC = json.loads(spec_bytes())
METHODS = {"get", "put", "post", "delete", "patch", "options", "head", "trace"}


def spec_operations() -> dict[tuple[str, str], dict]:
    return {(method.upper(), path): op for path, item in SPEC["paths"].items()
            for method, op in item.items() if method in METHODS}


def app_routes() -> set[tuple[str, str]]:
    """(method, path) of every route the app registers, but the catch-all
    that passes everything else through (and the HEAD aiohttp adds to a GET)."""
    app = Gate(parse_config(base_config(["http://127.0.0.1:9"]))).make_app()
    routes = set()
    for route in app.router.routes():
        info = route.resource.get_info()
        if "path" not in info:  # a pattern: the passthrough
            continue
        if route.method != "HEAD":
            routes.add((route.method, info["path"]))
    return routes


def test_the_spec_names_exactly_the_routes_the_app_registers():
    assert set(spec_operations()) == app_routes()
    assert any(r.method == "*" and "path" not in r.resource.get_info() for r in
               Gate(parse_config(base_config(["http://127.0.0.1:9"]))).make_app().router.routes())
    # What the passthrough must not reach: the gate's own paths are in the spec.
    assert _OWN_PATHS <= set(SPEC["paths"])
    assert {f"/admin/{p}" for p in ("state", "inflight", "drain", "undrain", "hold", "release")} <= set(SPEC["paths"])
    assert {("POST", p) for p in GENERATION_ROUTES} <= set(spec_operations())


def test_the_spec_is_valid_openapi_3_0():
    errors = sorted(Draft4Validator(OPENAPI_30).iter_errors(SPEC), key=str)
    assert not errors, errors[0]
    assert SPEC["openapi"].startswith("3.0.")


def test_the_spec_is_this_gates():
    assert SPEC["info"]["version"] == __version__ == VERSION


@pytest.mark.parametrize("key", sorted(spec_operations()), ids=" ".join)
def test_each_operation_says_who_needs_which_key(key):
    method, path = key
    op = spec_operations()[key]
    statuses = set(op["responses"])
    if path.startswith("/admin/"):
        assert op["security"] == [{"adminToken": []}]
        assert {"200", "401", "403"} <= statuses
    elif path in GENERATION_ROUTES:
        assert op["security"] == [{"apiKey": []}, {}]  # only when api_keys is set
        assert {"200", "400", "401", "413", "429", "503"} <= statuses
    else:
        assert path in _OWN_PATHS and op["security"] == [] and "401" not in statuses
    assert op["description"] and op["operationId"]


def test_the_error_shape_is_the_one_error_response_writes():
    error = SPEC["components"]["schemas"]["GateError"]["properties"]["error"]
    assert set(error["required"]) == {"message", "type", "param", "code"}
    assert set(error["properties"]["type"]["enum"]) == set(_ERROR_TYPES.values())


# The calls that answer with one of the gate's error codes, and where the code is.
_CODE_ARGUMENT = {"error_response": 2, "_reject": 4, "_bad": 2, "BadRequest": 1, "BodyRefused": 3,
                  "_upstream_error": 5}


def source_codes() -> set[str]:
    """Every error code written in the gate's source: the code argument of
    the calls that answer with one, the rejection table's, and the
    ``"invalid_" + field`` of the integer fields."""
    codes: set[str] = set()
    for path in sorted((GATE_DIR / "vllm_fleet_gate").glob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                func = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
                at = _CODE_ARGUMENT.get(func)
                if at is not None and len(node.args) > at and isinstance(node.args[at], ast.Constant):
                    codes.add(node.args[at].value)
                if func == "_int_field":
                    codes.add("invalid_" + node.args[1].value)
            if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "_REJECTIONS":
                codes |= {v.elts[1].value for v in node.value.values}
    return codes


def test_the_spec_lists_every_error_code_the_gate_answers_with():
    listed = set(SPEC["components"]["schemas"]["GateError"]["properties"]["error"]["properties"]["code"]["enum"])
    found = source_codes()
    assert len(found) > 25, found
    assert found == listed, (f"in the source, not the spec: {sorted(found - listed)}; "
                             f"in the spec, not the source: {sorted(listed - found)}")


# -- served ------------------------------------------------------------------------------
async def test_the_gate_serves_its_spec_with_no_key(fake_engine, start_gate):
    fake = await fake_engine()
    gate, client = await start_gate([fake], api_keys=["client-key-1"])
    r = await client.get("/openapi.json")
    assert r.status == 200 and r.headers["Content-Type"].startswith("application/json")
    assert await r.read() == spec_bytes()
    assert (await client.get("/admin/state")).status == 401  # the admin routes still want theirs
    r = await client.post("/openapi.json")
    assert r.status == 405 and r.headers["Allow"] == "GET"
    assert assert_gate_error(await r.json())["code"] == "method_not_allowed"
    assert [p for _, p in fake.seen if p != "/health"] == []  # the engine's own /openapi.json is not reached


async def test_the_gates_refusals_match_the_spec(fake_engine, start_gate):
    """A sample of refusals, validated against GateError (the fuzz run
    validates every answer it draws)."""
    fake = await fake_engine()
    gate, client = await start_gate([fake], api_keys=["client-key-1"], queue={"max_depth": 0})
    key = {"Authorization": "Bearer client-key-1"}
    admin = {"Authorization": f"Bearer {ADMIN}"}
    fake.block = True
    calls = [
        ("POST", "/v1/completions", {}, None, 401),
        ("POST", "/v1/completions", key, b"{", 400),
        ("POST", "/v1/completions", key, json.dumps(completion("x", max_tokens=0)).encode(), 400),
        ("POST", "/v1/completions", key, json.dumps(completion("x", prompt="w " * 300)).encode(), 400),
        ("GET", "/admin/state", {"Authorization": "Bearer nope"}, None, 403),
        ("GET", "/admin/nothing", admin, None, 404),
        ("POST", "/admin/drain", admin, b'{"upstream": "e9"}', 404),
        ("POST", "/admin/hold", admin, b'{"seconds": -1}', 400),
        ("DELETE", "/metrics", {}, None, 405),
    ]
    for method, path, headers, body, status in calls:
        r = await client.request(method, path, headers=headers, data=body)
        assert r.status == status, (method, path, r.status)
        assert_gate_error(await r.json())


# -- packaged -----------------------------------------------------------------------------
def test_the_editable_install_finds_the_spec(tmp_path):
    r = run("-c", "from vllm_fleet_gate.app import spec_bytes; import sys; sys.stdout.buffer.write(spec_bytes())",
            cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == SPEC


def test_the_roles_wheel_carries_the_spec(tmp_path):
    """As roles/gate_service/tasks/install.yml builds it (see test_gate_install)."""
    src = tmp_path / "gate"
    shutil.copytree(GATE_DIR, src, ignore=shutil.ignore_patterns("build", "dist", "*.egg-info", "__pycache__"))
    r = run("-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "--quiet",
            "--wheel-dir", str(tmp_path / "dist"), str(src), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    wheel = zipfile.ZipFile(tmp_path / "dist" / f"vllm_fleet_gate-{VERSION}-py3-none-any.whl")
    assert json.loads(wheel.read(f"vllm_fleet_gate/{SPEC_FILE}")) == SPEC


def test_the_docs_say_where_the_spec_is_and_that_it_needs_no_key():
    doc = (GATE_DIR.parent / "docs" / "gate.md").read_text()
    section = re.search(r"(?ms)^### The gate's OpenAPI spec$(.*?)^#", doc)
    assert section and "`GET /openapi.json`" in section.group(1)
    assert "needs no key" in section.group(1) and SPEC_FILE in section.group(1)
