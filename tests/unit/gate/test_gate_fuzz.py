"""The gate fuzzed from its own OpenAPI spec (schemathesis): a real gate
process (``python -m vllm_fleet_gate``, as systemd runs it) in front of a
healthy fake engine on loopback, every operation of the spec driven with
generated requests, valid and not.

For every request: no 5xx (the engine is healthy, so a 5xx would be the
gate's own), a status, content type and body the spec documents, nothing in
the gate's log at ERROR or with a traceback, and the books (reserved
tokens, in flight, queued, read from /admin/state) back at zero. After each
request a hold or drain an admin call made is undone, so each request
finds the gate as the first did. The run is derandomized (a fixed seed, no
example database), so it draws the same requests every time; MAX_EXAMPLES
per operation keeps it well under a minute on a 2-core machine.

The spec cannot say what a header's raw bytes may be, and the auth config
always sends the right key, so ``test_fuzz_the_key`` fuzzes the bearer
token itself, with latin-1 bytes, on every operation that needs one.
"""
from __future__ import annotations

import json

import pytest
import schemathesis
from gate_helpers import ADMIN, EngineThread, GateProcess, SturdyFakeVLLM, assert_gate_error, log_problems
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    ignored_auth,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from vllm_fleet_gate.app import spec_bytes

KEY = "client-key-1"
ZERO = {"reserved_tokens": 0, "inflight": 0, "queued": 0}
MAX_EXAMPLES = 25  # per operation, in the fuzzing phase (the coverage phase adds its own few)
SEED = 20260601
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance,
          response_headers_conformance, ignored_auth]

SPEC = json.loads(spec_bytes())
schema = schemathesis.openapi.from_dict(SPEC, config=schemathesis.Config.from_dict({
    "seed": SEED,
    "generation": {"mode": "all", "database": "none", "max-examples": MAX_EXAMPLES},
    "phases": {"examples": {"enabled": False}, "stateful": {"enabled": False}},
    "auth": {"openapi": {"apiKey": {"bearer": KEY}, "adminToken": {"bearer": ADMIN}}},
}))


@pytest.fixture(scope="module")
def fuzzed_gate(tmp_path_factory):
    engine = EngineThread(SturdyFakeVLLM())
    fake = engine.start()
    gate = GateProcess(tmp_path_factory.mktemp("fuzz"), fake, api_keys=[KEY], max_hold_s=2, queue={"timeout_s": 2},
                       listen={"body_timeout_s": 5, "write_timeout_s": 5})
    gate.start()
    yield gate
    status = gate.stop()
    engine.stop()
    log = gate.log_path.read_text(errors="replace")
    assert status == 0, log
    assert not log_problems(log), log


def assert_gate_errors_are_gate_errors(response) -> None:
    """The spec lets a 400 or 404 be the engine's too. The fake engine's
    errors here are its 404 for an unknown model and FastAPI's
    ``{"detail": ...}``: any other error is the gate's, so it must be the
    spec's GateError exactly."""
    if response.status_code < 400 or not response.headers.get("Content-Type", "").startswith("application/json"):
        return
    body = response.json()
    from_engine = isinstance(body, dict) and ("detail" in body or (
        response.status_code == 404 and isinstance(body.get("error"), dict)
        and body["error"].get("type") == "NotFoundError"))
    if not from_engine:
        assert_gate_error(body)


@schema.parametrize()
@settings(deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
def test_fuzz(case, fuzzed_gate):
    gate = fuzzed_gate
    response = case.call(base_url=gate.url, session=gate.session, timeout=10)
    books = gate.books_after()
    case.validate_response(response, checks=CHECKS)
    assert_gate_errors_are_gate_errors(response)
    log = gate.new_log()
    assert not log_problems(log), f"the gate logged:\n{log}\nfor:\n{case.as_curl_command()}"
    assert books == ZERO, f"the books are not back at zero: {books}\nafter:\n{case.as_curl_command()}"


# The spec's generated headers are ASCII (latin-1 at most), and the auth
# config sends the right key: the key itself is fuzzed here, in the bytes a
# client can put in a header (latin-1, so 0x80-0xff arrive undecodable), on
# every operation that needs one.
SECURED = [op for op in (r.ok() for r in schema.get_all_operations()) if op.definition.raw.get("security")]
TOKENS = st.text(st.characters(min_codepoint=0x21, max_codepoint=0xFF, exclude_characters="\x7f"), min_size=1,
                 max_size=40)


@settings(max_examples=60, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
@given(case=st.sampled_from(SECURED).flatmap(lambda op: op.as_strategy()), token=TOKENS,
       scheme=st.sampled_from(["Bearer ", "bearer  ", "Basic ", ""]))
def test_fuzz_the_key(fuzzed_gate, case, token, scheme):
    gate = fuzzed_gate
    case.headers = {**(case.headers or {}), "Authorization": scheme + token}
    response = case.call(base_url=gate.url, session=gate.session, timeout=10)
    books = gate.books_after()
    assert response.status_code in (401, 403), (response.status_code, case.as_curl_command())
    case.validate_response(response, checks=[c for c in CHECKS if c is not ignored_auth])
    assert_gate_errors_are_gate_errors(response)
    log = gate.new_log()
    assert not log_problems(log), f"the gate logged:\n{log}\nfor:\n{case.as_curl_command()}"
    assert books == ZERO, f"the books are not back at zero: {books}\nafter:\n{case.as_curl_command()}"
