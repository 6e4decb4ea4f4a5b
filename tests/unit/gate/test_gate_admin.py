"""Several engines, readiness, the gate's /health, and the admin API
(auth, state, drain/undrain, hold/release)."""
from __future__ import annotations

import asyncio

import pytest
from gate_helpers import ADMIN, WAIT, completion, post, until

AUTH = {"Authorization": f"Bearer {ADMIN}"}


def pools(*fakes_and_sizes):
    return [
        {"name": f"e{i + 1}", "url": fake.url, "kv_cache_tokens": size, "max_model_len": 100}
        for i, (fake, size) in enumerate(fakes_and_sizes)
    ]


async def two(fake_engine, start_gate, size1=100, size2=100, **overrides):
    f1, f2 = await fake_engine(), await fake_engine()
    gate, client = await start_gate([f1, f2], upstreams=pools((f1, size1), (f2, size2)), **overrides)
    return f1, f2, gate, client


# -- routing and readiness -----------------------------------------------------------
async def test_routes_to_the_engine_with_room(fake_engine, start_gate):
    f1, f2, gate, client = await two(fake_engine, start_gate, 50, 100)
    f1.block = f2.block = True
    a = post(client, completion("a"))
    await f2.wait_requests(1)  # e2: 100 free beats 50
    b = post(client, completion("b"))
    await f2.wait_requests(2)  # e2: 60 free beats 50
    c = post(client, completion("c"))
    await f1.wait_requests(1)  # e1: 50 free beats 20
    assert (f1.labels(), f2.labels()) == (["c"], ["a", "b"])
    state = gate.state()["upstreams"]
    assert (state["e1"]["reserved_tokens"], state["e2"]["reserved_tokens"]) == (40, 80)
    f1.release_all()
    f2.release_all()
    assert {(await t).status for t in (a, b, c)} == {200}


async def test_a_not_ready_engine_gets_nothing(fake_engine, start_gate):
    f1, f2, gate, client = await two(fake_engine, start_gate)
    f1.health_status = 503  # the engine died: vLLM answers 503
    await gate.poll_health()
    r = await client.get("/health")
    assert r.status == 200
    assert await r.json() == {"state": "ok", "held": False, "upstreams": {
        "e1": {"ready": False, "drained": False, "state": "unhealthy", "detail": f"/health answered 503 at {f1.url}"},
        "e2": {"ready": True, "drained": False, "state": "ready", "detail": ""},
    }}
    for label in "abc":
        assert (await client.post("/v1/completions", json=completion(label, 5, 5))).status == 200
    assert (f1.labels(), f2.labels()) == ([], ["a", "b", "c"])
    f1.health_status = 200
    await gate.poll_health()
    assert gate.admission.engines["e1"].ready


async def test_queued_requests_go_when_an_engine_becomes_ready(fake_engine, start_gate):
    f1, f2, gate, client = await two(fake_engine, start_gate)
    f1.health_status = f2.health_status = 503
    await gate.poll_health()
    r = await client.get("/health")
    assert r.status == 503
    a = post(client, completion("a"))
    await until(lambda: gate.admission.queue_depth == 1, what="a to queue")
    f2.health_status = 200
    await gate.poll_health()
    assert (await a).status == 200 and f2.labels() == ["a"]


async def test_background_health_polling(fake_engine, start_gate):
    fake = await fake_engine()
    gate, client = await start_gate([fake], health_check={"interval_s": 0.01})
    fake.health_status = 503
    await until(lambda: not gate.admission.engines["e1"].ready, what="the poller to see the 503")
    fake.health_status = 200
    await until(lambda: gate.admission.engines["e1"].ready, what="the poller to see the 200")


# -- admin auth ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    "method, path",
    [
        ("GET", "/admin/state"),
        ("GET", "/admin/inflight"),
        ("POST", "/admin/drain"),
        ("POST", "/admin/undrain"),
        ("POST", "/admin/hold"),
        ("POST", "/admin/release"),
    ],
)
@pytest.mark.parametrize(
    "headers, status, code",
    [
        ({}, 401, "missing_admin_token"),
        ({"Authorization": "Token " + ADMIN}, 401, "missing_admin_token"),
        ({"Authorization": "Bearer wrong-token"}, 403, "invalid_admin_token"),
        ({"Authorization": "Bearer client-key-1"}, 403, "invalid_admin_token"),  # an API key is not an admin token
    ],
)
async def test_admin_needs_the_admin_token(fake_engine, start_gate, method, path, headers, status, code):
    fake = await fake_engine()
    gate, client = await start_gate([fake], api_keys=["client-key-1"])
    r = await client.request(method, path, json={"upstream": "e1", "seconds": 1}, headers=headers)
    assert r.status == status
    assert (await r.json())["error"]["code"] == code
    assert not gate.admission.held and not gate.admission.engines["e1"].drained


async def test_admin_state_and_inflight(one):
    fake, gate, client = one
    fake.block = True
    a = post(client, completion("a"))
    await fake.wait_requests(1)
    r = await client.get("/admin/state", headers=AUTH)
    assert r.status == 200
    state = await r.json()
    assert state["state"] == "ok" and state["shutting_down"] is False and state["held"] is False
    assert (state["inflight"], state["queued"], state["reserved_tokens"]) == (1, 0, 40)
    assert state["queue"]["max_depth"] == 8 and state["queue"]["timeout_s"] == WAIT
    assert state["max_hold_s"] == 600.0  # the rolling restart sizes its hold against it
    assert state["upstreams"]["e1"] == {
        "ready": True, "drained": False, "state": "ready", "detail": "", "inflight": 1, "reserved_tokens": 40,
        "kv_cache_tokens": 100, "max_model_len": 100, "url": fake.url,
    }
    r = await client.get("/admin/inflight", headers=AUTH)
    assert await r.json() == {"inflight": 1, "queued": 0, "upstreams": {"e1": 1}}
    fake.release("a")
    assert (await a).status == 200
    r = await client.get("/admin/inflight", headers=AUTH)
    assert await r.json() == {"inflight": 0, "queued": 0, "upstreams": {"e1": 0}}


# -- drain ------------------------------------------------------------------------------------
async def test_drain_sends_new_work_elsewhere_while_inflight_finishes(fake_engine, start_gate):
    f1, f2, gate, client = await two(fake_engine, start_gate)
    f1.block = True
    a = post(client, completion("a"))  # e1 (config order on a tie)
    await f1.wait_requests(1)
    r = await client.post("/admin/drain", json={"upstream": "e1"}, headers=AUTH)
    assert r.status == 200 and await r.json() == {"upstream": "e1", "drained": True, "inflight": 1}
    for label in "bc":
        assert (await client.post("/v1/completions", json=completion(label))).status == 200
    assert f2.labels() == ["b", "c"]
    r = await client.get("/health")
    assert (await r.json())["upstreams"]["e1"] == {"ready": True, "drained": True, "state": "drained", "detail": ""}
    f1.block = False
    f1.release("a")
    assert (await a).status == 200  # in-flight work on a drained engine finishes
    r = await client.post("/admin/undrain", json={"upstream": "e1"}, headers=AUTH)
    assert await r.json() == {"upstream": "e1", "drained": False, "inflight": 0}
    assert (await client.post("/v1/completions", json=completion("d"))).status == 200
    assert f1.labels() == ["a", "d"]


async def test_draining_the_only_engine_queues_until_undrain(one):
    fake, gate, client = one
    await client.post("/admin/drain", json={"upstream": "e1"}, headers=AUTH)
    r = await client.get("/health")
    assert r.status == 503  # nothing can be admitted now, and the body says why
    body = await r.json()
    assert (body["state"], body["message"]) == ("unavailable", "no engine is ready: e1 is drained")
    a = post(client, completion("a"))
    await until(lambda: gate.admission.queue_depth == 1, what="a to queue")
    await client.post("/admin/undrain", json={"upstream": "e1"}, headers=AUTH)
    assert (await a).status == 200


@pytest.mark.parametrize(
    "body, status, code",
    [
        ({}, 400, "upstream_required"),
        ({"upstream": 3}, 400, "upstream_required"),
        ({"upstream": "nope"}, 404, "unknown_upstream"),
        ([1], 400, "invalid_json"),
    ],
)
async def test_drain_bad_requests(one, body, status, code):
    fake, gate, client = one
    for path in ("/admin/drain", "/admin/undrain"):
        r = await client.post(path, json=body, headers=AUTH)
        assert r.status == status and (await r.json())["error"]["code"] == code


# -- hold -------------------------------------------------------------------------------------
async def test_hold_queues_everything_until_release(one):
    fake, gate, client = one
    r = await client.post("/admin/hold", json={"seconds": 60}, headers=AUTH)
    assert r.status == 200
    body = await r.json()
    assert body["held"] is True and 59 < body["hold_remaining_s"] <= 60
    r = await client.get("/health")
    assert r.status == 200 and (await r.json())["state"] == "holding"
    a = post(client, completion("a", 5, 5))
    await until(lambda: gate.admission.queue_depth == 1, what="a to queue behind the hold")
    assert fake.requests == []
    r = await client.post("/admin/release", headers=AUTH)
    assert await r.json() == {"held": False, "queued": 0}
    assert (await a).status == 200
    assert gate.metrics.queue_seconds._sum.get() > 0


async def test_hold_runs_out_by_itself(one):
    fake, gate, client = one
    await client.post("/admin/hold", json={"seconds": 0.05}, headers=AUTH)
    r = await asyncio.wait_for(client.post("/v1/completions", json=completion("a")), WAIT)
    assert r.status == 200
    assert not gate.admission.held


@pytest.mark.parametrize("seconds", [601, 0, -1, "10", True, None])
async def test_hold_is_bounded(one, seconds):
    fake, gate, client = one
    r = await client.post("/admin/hold", json={"seconds": seconds}, headers=AUTH)
    assert r.status == 400
    assert (await r.json())["error"] == {
        "message": 'seconds must be a number greater than 0 and at most 600: {"seconds": N}',
        "type": "invalid_request_error", "param": None, "code": "invalid_hold",
    }
    assert not gate.admission.held


async def test_hold_bound_follows_the_config(fake_engine, start_gate):
    fake = await fake_engine()
    gate, client = await start_gate([fake], max_hold_s=30)
    r = await client.post("/admin/hold", json={"seconds": 31}, headers=AUTH)
    assert r.status == 400
    r = await client.post("/admin/hold", json={"seconds": 30}, headers=AUTH)
    assert r.status == 200
    await client.post("/admin/release", headers=AUTH)
