"""Graceful shutdown: the path SIGTERM takes, called directly, and once
end to end through a real process and a real signal."""
from __future__ import annotations

import asyncio
import json
import os
import signal
import sys

import aiohttp
from gate_helpers import ADMIN, GATE_DIR, WAIT, base_config, completion, fill_then_queue, free_port


async def test_shutdown_refuses_new_fails_queued_and_lets_inflight_finish(one):
    fake, gate, client = one
    a, b, queued = await fill_then_queue(fake, gate, client)

    gate.begin_shutdown()

    r = await queued
    assert r.status == 503 and r.headers["Retry-After"] == "7"
    assert (await r.json())["error"]["code"] == "shutting_down"
    r = await client.post("/v1/completions", json=completion("new"))
    assert r.status == 503 and r.headers["Retry-After"] == "7"
    assert (await r.json())["error"] == {
        "message": "The gate is shutting down; retry shortly.",
        "type": "service_unavailable", "param": None, "code": "shutting_down",
    }
    r = await client.get("/health")
    assert r.status == 503 and (await r.json())["state"] == "draining"
    assert await gate.wait_idle(0.01) is False  # a and b still run

    fake.release_all()
    assert [(await t).status for t in (a, b)] == [200, 200]
    assert await gate.wait_idle(WAIT) is True
    assert fake.labels() == ["a", "b"]
    assert gate.metrics.rejected.labels("shutting_down")._value.get() == 2


async def test_sigterm_end_to_end(fake_engine, tmp_path):
    """A real gate process: SIGTERM -> new requests 503, the in-flight one
    completes, exit status 0."""
    fake = await fake_engine()
    port = free_port()
    cfg = base_config([fake], listen={"host": "127.0.0.1", "port": port}, shutdown_timeout_s=WAIT)
    path = tmp_path / "gate.json"
    path.write_text(json.dumps(cfg))
    env = {**os.environ, "PYTHONPATH": str(GATE_DIR), "VLLM_FLEET_GATE_CONFIG": str(path)}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "vllm_fleet_gate", env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as session:
            async def up() -> bool:
                try:
                    async with session.get(url + "/health") as r:
                        return r.status == 200
                except aiohttp.ClientConnectionError:
                    return False

            loop = asyncio.get_running_loop()
            deadline = loop.time() + 15
            while not await up():
                assert proc.returncode is None, await proc.stderr.read()
                assert loop.time() < deadline, "the gate did not come up"
                await asyncio.sleep(0.05)

            fake.block = True
            inflight = asyncio.create_task(session.post(url + "/v1/completions", json=completion("a")))
            await fake.wait_requests(1)
            proc.send_signal(signal.SIGTERM)
            # New requests are refused with 503 while the in-flight one runs.
            async def refused() -> bool:
                async with session.post(url + "/v1/completions", json=completion("b")) as r:
                    return r.status == 503 and r.headers.get("Retry-After") == "7"
            deadline = loop.time() + WAIT
            while not await refused():
                assert loop.time() < deadline, "the gate kept admitting after SIGTERM"
                await asyncio.sleep(0.01)
            async with session.get(url + "/admin/inflight", headers={"Authorization": f"Bearer {ADMIN}"}) as r:
                assert await r.json() == {"inflight": 1, "queued": 0, "upstreams": {"e1": 1}}
            fake.release_all()
            r = await asyncio.wait_for(inflight, WAIT)
            assert r.status == 200 and (await r.json())["choices"][0]["text"] == "ok a"
        code = await asyncio.wait_for(proc.wait(), WAIT)
        stderr = (await proc.stderr.read()).decode()
        assert code == 0, stderr
        assert "Traceback" not in stderr
        assert "all requests finished; exiting" in stderr
        assert fake.labels() == ["a"]
        # The access log is written in batches (logsink.py): every line is
        # there by the exit, the completed request's included.
        access = [line for line in stderr.splitlines() if line.startswith("INFO vllm_fleet_gate.access: ")]
        assert any(" POST /v1/completions 200 " in line for line in access), stderr
        assert any(" 503 " in line and "reason=shutting_down" in line for line in access), stderr
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_port_in_use_exits_1(fake_engine, tmp_path):
    fake = await fake_engine()
    busy = fake.server.port  # the fake engine holds it
    path = tmp_path / "gate.json"
    path.write_text(json.dumps(base_config([fake], listen={"host": "127.0.0.1", "port": busy})))
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "vllm_fleet_gate", "--config", str(path),
        env={**os.environ, "PYTHONPATH": str(GATE_DIR)}, stderr=asyncio.subprocess.PIPE,
    )
    _, err = await asyncio.wait_for(proc.communicate(), 15)
    assert proc.returncode == 1
    assert f"cannot listen on 127.0.0.1:{busy}" in err.decode()
    assert "Traceback" not in err.decode()
