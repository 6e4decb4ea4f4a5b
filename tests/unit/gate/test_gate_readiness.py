"""When no engine can take a request, the gate says so, and says why:
per engine, down (cannot connect), unresponsive (/health too slow),
unhealthy (/health not 200) or drained; distinct from waiting for room in
a KV pool. /health's body agrees with its status."""
from __future__ import annotations

import asyncio
import logging

from gate_helpers import ADMIN, completion, free_port

AUTH = {"Authorization": f"Bearer {ADMIN}"}


async def health(client) -> tuple[int, dict]:
    r = await client.get("/health")
    return r.status, await r.json()


async def test_engine_down_from_the_start(start_gate):
    url = f"http://127.0.0.1:{free_port()}"
    gate, client = await start_gate([url], queue={"timeout_s": 0.05})
    status, body = await health(client)
    assert status == 503
    assert body == {
        "state": "unavailable", "held": False,
        "message": f"no engine is ready: e1 is down (connection refused at {url})",
        "upstreams": {"e1": {"ready": False, "drained": False, "state": "down",
                             "detail": f"connection refused at {url}"}},
    }
    # A request waits for an engine, then is told it was an engine it waited for, not KV room.
    r = await client.post("/v1/completions", json=completion("a", prompt=[1]))
    assert r.status == 503 and r.headers["Retry-After"] == "7"
    error = (await r.json())["error"]
    assert (error["type"], error["code"]) == ("service_unavailable", "no_ready_upstream")
    assert error["message"] == (f"No engine is ready: e1 is down (connection refused at {url}). "
                                "Waited 0.05 s in the queue for one; retry later.")
    assert gate.metrics.rejected.labels("no_ready_upstream")._value.get() == 1
    assert gate.metrics.rejected.labels("queue_timeout")._value.get() == 0


async def test_engine_answering_503_is_unhealthy(one):
    fake, gate, client = one
    fake.health_status = 503
    await gate.poll_health()
    status, body = await health(client)
    assert (status, body["state"]) == (503, "unavailable")
    assert body["upstreams"]["e1"]["state"] == "unhealthy"
    assert body["message"] == f"no engine is ready: e1 is unhealthy (/health answered 503 at {fake.url})"
    fake.health_status = 200
    await gate.poll_health()
    status, body = await health(client)
    assert (status, body["state"], "message" in body) == (200, "ok", False)
    assert body["upstreams"]["e1"] == {"ready": True, "drained": False, "state": "ready", "detail": ""}


async def test_engine_not_answering_health_is_unresponsive(fake_engine, start_gate):
    fake = await fake_engine()
    gate, client = await start_gate([fake], health_check={"timeout_s": 0.05})
    fake.health_delay = 1.0
    await gate.poll_health()
    engine = gate.admission.engines["e1"]
    assert (engine.ready, engine.state) == (False, "unresponsive")
    assert engine.detail == f"/health did not answer within 0.05 s at {fake.url}"


async def test_every_engine_drained_or_down(fake_engine, start_gate):
    f1 = await fake_engine()
    down = f"http://127.0.0.1:{free_port()}"
    gate, client = await start_gate([f1, down], queue={"timeout_s": 0.05})
    await client.post("/admin/drain", json={"upstream": "e1"}, headers=AUTH)
    status, body = await health(client)
    assert status == 503
    assert body["message"] == f"no engine is ready: e1 is drained; e2 is down (connection refused at {down})"
    r = await client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]})
    assert r.status == 503 and (await r.json())["error"]["code"] == "no_ready_upstream"


async def test_waiting_for_kv_room_says_so_and_names_an_engine_that_is_down(fake_engine, start_gate):
    f1 = await fake_engine()
    down = f"http://127.0.0.1:{free_port()}"
    gate, client = await start_gate([f1, down], queue={"timeout_s": 0.1})
    f1.block = True
    a, b = (asyncio.create_task(client.post("/v1/completions", json=completion(x))) for x in "ab")
    await f1.wait_requests(2)
    r = await client.post("/v1/completions", json=completion("c"))
    assert r.status == 503
    error = (await r.json())["error"]
    assert error["code"] == "queue_timeout"
    assert error["message"] == ("Timed out after 0.1 s waiting for room in an engine's KV cache "
                                f"(e2 is down (connection refused at {down})); retry later.")
    f1.release_all()
    assert [(await t).status for t in (a, b)] == [200, 200]


async def test_a_hold_that_outlasts_the_queue_says_so(fake_engine, start_gate):
    fake = await fake_engine()
    gate, client = await start_gate([fake], queue={"timeout_s": 0.05})
    await client.post("/admin/hold", json={"seconds": 60}, headers=AUTH)
    status, body = await health(client)
    assert (status, body["state"], body["held"]) == (200, "holding", True)  # an engine is ready
    r = await client.post("/v1/completions", json=completion("a"))
    assert r.status == 503
    assert (await r.json())["error"] == {
        "message": "Timed out after 0.05 s waiting for the hold on admissions to end (POST /admin/hold); retry later.",
        "type": "service_unavailable", "param": None, "code": "queue_timeout",
    }
    await client.post("/admin/release", headers=AUTH)


async def test_a_refused_request_marks_the_engine_down_and_logs_why(one, caplog):
    fake, gate, client = one
    caplog.set_level(logging.INFO, logger="vllm_fleet_gate")
    url = fake.url
    await fake.server.close()
    r = await client.post("/v1/completions", json=completion("a", prompt=[1]))
    assert r.status == 502
    assert (await r.json())["error"]["message"] == f"Cannot connect to engine e1 at {url}: connection refused."
    status, body = await health(client)
    assert status == 503 and body["upstreams"]["e1"]["detail"] == f"connection refused at {url}"
    assert f"upstream e1 is down (connection refused at {url})" in caplog.text
    await gate.poll_health()  # still down: said once
    assert caplog.text.count("upstream e1 is down") == 1


async def test_admin_state_agrees(one):
    fake, gate, client = one
    fake.health_status = 500
    await gate.poll_health()
    state = await (await client.get("/admin/state", headers=AUTH)).json()
    assert state["state"] == "unavailable"
    assert (state["upstreams"]["e1"]["state"], state["upstreams"]["e1"]["detail"]) == (
        "unhealthy", f"/health answered 500 at {fake.url}")
