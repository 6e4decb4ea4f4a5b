"""/metrics, parsed as Prometheus parses it, with values checked."""
from __future__ import annotations

import asyncio

from gate_helpers import completion, until
from prometheus_client.parser import text_string_to_metric_families


async def scrape(client) -> dict:
    """{(sample name, sorted labels): value}."""
    r = await client.get("/metrics")
    assert r.status == 200 and r.headers["Content-Type"].startswith("text/plain")
    out = {}
    for family in text_string_to_metric_families(await r.text()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def v(samples: dict, name: str, **labels) -> float:
    return samples[(f"vllm_fleet_gate_{name}", tuple(sorted(labels.items())))]


async def test_metrics_follow_the_books(fake_engine, start_gate):
    fake = await fake_engine()
    gate, client = await start_gate([fake], queue={"max_depth": 1})
    m = await scrape(client)
    assert v(m, "queue_depth") == 0 and v(m, "reserved_tokens", upstream="e1") == 0
    assert v(m, "kv_cache_tokens", upstream="e1") == 100 and v(m, "upstream_ready", upstream="e1") == 1
    assert v(m, "rejected_total", reason="queue_full") == 0  # series exist before the first event

    fake.block = True
    a = asyncio.create_task(client.post("/v1/completions", json=completion("a")))
    b = asyncio.create_task(client.post("/v1/completions", json=completion("b", 40, 10)))
    await fake.wait_requests(2)
    c = asyncio.create_task(client.post("/v1/completions", json=completion("c")))
    await until(lambda: gate.admission.queue_depth == 1, what="c to queue")
    assert (await client.post("/v1/completions", json=completion("d"))).status == 429
    assert (await client.post("/v1/completions", data=b"{")).status == 400

    m = await scrape(client)
    assert v(m, "queue_depth") == 1
    assert v(m, "reserved_tokens", upstream="e1") == 90
    assert v(m, "inflight", upstream="e1") == 2
    assert v(m, "admitted_total", upstream="e1") == 2
    assert v(m, "rejected_total", reason="queue_full") == 1
    assert v(m, "rejected_total", reason="bad_request") == 1

    fake.release_all()
    assert [(await t).status for t in (a, b, c)] == [200, 200, 200]
    m = await scrape(client)
    assert v(m, "queue_depth") == 0
    assert v(m, "reserved_tokens", upstream="e1") == 0
    assert v(m, "inflight", upstream="e1") == 0
    assert v(m, "admitted_total", upstream="e1") == 3
    assert v(m, "queue_seconds_count") == 3
    assert v(m, "queue_seconds_sum") > 0  # c waited
    assert v(m, "queue_seconds_bucket", le="0.001") >= 2  # a and b went at once
    assert v(m, "upstream_seconds_count", upstream="e1") == 3
    assert v(m, "responses_total", code="200") == 3
    assert v(m, "responses_total", code="429") == 1
    assert v(m, "held") == 0 and v(m, "shutting_down") == 0


async def test_stream_first_byte_and_error_counters(one):
    fake, gate, client = one
    r = await client.post("/v1/completions", json=completion("s", stream=True))
    assert r.status == 200
    await r.read()
    await fake.server.close()
    assert (await client.post("/v1/completions", json=completion("x"))).status == 502
    m = await scrape(client)
    assert v(m, "upstream_first_byte_seconds_count", upstream="e1") == 1
    assert v(m, "upstream_errors_total", upstream="e1", kind="connect") == 1
    assert v(m, "upstream_ready", upstream="e1") == 0
