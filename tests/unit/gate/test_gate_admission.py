"""The admission books, tested synchronously with a fake clock: cost,
limits, FIFO, routing, drain, hold and shutdown (the request readers:
test_gate_generation.py)."""
from __future__ import annotations

import pytest

from vllm_fleet_gate.admission import (
    ADMITTED,
    CANCELLED,
    DONE,
    FAILED,
    QUEUED,
    Admission,
    Demand,
    Rejected,
    UnknownUpstream,
)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def books(engines=(("e1", 100, 100),), *, depth=8, count_max_tokens=True, ready=True, clock=None) -> Admission:
    adm = Admission(engines, max_queue_depth=depth, count_max_tokens=count_max_tokens, clock=clock or Clock())
    for name in adm.engines:
        adm.set_ready(name, ready)
    return adm


def d(prompt=30, max_tokens=10, sequences=1) -> Demand:
    prompts = prompt if isinstance(prompt, tuple) else (prompt,)
    return Demand(prompts, max_tokens, sequences)


def assert_zero(adm: Admission) -> None:
    assert (adm.reserved_tokens, adm.inflight, adm.queue_depth) == (0, 0, 0)


# -- cost -------------------------------------------------------------------
@pytest.mark.parametrize(
    "demand, count_max_tokens, cost",
    [
        (d(30, 10), True, 40),
        (d(30, 10), False, 30),
        (d(30, None), True, 100),  # no max_tokens: up to max_model_len
        (d(30, None), False, 30),
        (d(30, 10, sequences=3), True, 60),  # n=3: the prompt once, the budget thrice
        (d((20, 30), 10), True, 70),  # a batch of two prompts
        (d(100, None), True, 100),
        (d(101, None), True, None),  # longer than max_model_len
        (d(95, 10), True, None),
    ],
)
def test_cost(demand, count_max_tokens, cost):
    adm = books(count_max_tokens=count_max_tokens)
    assert adm.cost(demand, adm.engines["e1"]) == cost


# -- limits: rejected before ever queuing -------------------------------------
@pytest.mark.parametrize(
    "demand, reason, message",
    [
        (d(101, None), "too_long",
         "This model's maximum context length is 100 tokens. However, your prompt is 101 tokens. "
         "Please reduce the length of the prompt."),
        (d(90, 20), "too_long",
         "This model's maximum context length is 100 tokens. However, you requested 110 tokens "
         "(90 in the prompt, 20 for the completion). Please reduce the length of the prompt or max_tokens."),
        (d(30, 10**9), "too_long",
         "This model's maximum context length is 100 tokens. However, you requested 1000000030 tokens "
         "(30 in the prompt, 1000000000 for the completion). Please reduce the length of the prompt or max_tokens."),
    ],
)
def test_too_long_is_rejected_before_queueing(demand, reason, message):
    adm = books()
    adm.submit(d(50, 10))  # busy, so a fitting request would queue
    with pytest.raises(Rejected) as exc:
        adm.submit(demand)
    assert (exc.value.reason, exc.value.message) == (reason, message)
    assert adm.queue_depth == 0


def test_bigger_than_every_pool_is_rejected():
    adm = books((("e1", 50, 100), ("e2", 60, 100)))
    with pytest.raises(Rejected) as exc:
        adm.submit(d(55, 10))
    assert exc.value.reason == "never_fits"
    assert exc.value.message == (
        "This request needs 65 KV-cache tokens, more than the largest engine's KV cache pool (60 tokens), "
        "so it could never be admitted. Please reduce the prompt or max_tokens."
    )
    assert adm.queue_depth == 0


def test_pool_limit_counts_every_engine_even_when_not_ready():
    adm = books((("e1", 50, 100), ("e2", 100, 100)))
    adm.set_ready("e2", False)
    ticket = adm.submit(d(60, 10))  # fits e2's pool once it is back
    assert ticket.state == QUEUED
    adm.set_ready("e2", True)
    assert (ticket.state, ticket.engine) == (ADMITTED, "e2")
    adm.release(ticket)
    assert_zero(adm)


# -- the pool and the FIFO queue -----------------------------------------------
def test_two_fit_third_queues_until_one_finishes():
    adm = books()
    a, b = adm.submit(d()), adm.submit(d())
    assert (a.state, b.state, adm.reserved_tokens) == (ADMITTED, ADMITTED, 80)
    c = adm.submit(d())
    assert c.state == QUEUED and adm.queue_depth == 1
    assert adm.release(a) == [c]
    assert (a.state, c.state, adm.reserved_tokens) == (DONE, ADMITTED, 80)
    adm.release(b)
    adm.release(c)
    assert_zero(adm)


def test_fifo_is_strict_a_small_request_does_not_overtake():
    adm = books()
    a, b = adm.submit(d(30, 10)), adm.submit(d(30, 10))  # 80 of 100
    big = adm.submit(d(40, 10))  # needs 50: waits
    small = adm.submit(d(5, 5))  # needs 10, would fit in the free 20, but queues behind
    assert (big.state, small.state) == (QUEUED, QUEUED)
    assert adm.release(a) == [big, small]  # 60 free: big (50), then small (10)
    assert adm.reserved_tokens == 40 + 50 + 10
    for t in (b, big, small):
        adm.release(t)
    assert_zero(adm)


def test_queue_full_is_rejected():
    adm = books(depth=1)
    a, b = adm.submit(d()), adm.submit(d())
    c = adm.submit(d())
    with pytest.raises(Rejected) as exc:
        adm.submit(d())
    assert exc.value.reason == "queue_full"
    assert exc.value.message == "The admission queue is full (1 requests waiting); retry later."
    for t in (c, a, b):
        adm.release(t)
    assert_zero(adm)


def test_depth_zero_means_no_queue():
    adm = books(depth=0)
    a = adm.submit(d(50, 50))
    with pytest.raises(Rejected, match="queue is full"):
        adm.submit(d())
    adm.release(a)
    assert_zero(adm)


def test_cancel_while_queued_leaves_no_trace_and_unblocks_the_rest():
    adm = books()
    a = adm.submit(d(50, 10))  # 60
    big = adm.submit(d(40, 10))  # 50: waits
    small = adm.submit(d(10, 10))  # 20: waits behind big
    assert adm.release(big) == [small]  # the head left: small fits now
    assert big.state == CANCELLED and adm.queue_depth == 0
    assert adm.release(big) == []  # idempotent
    adm.release(a)
    adm.release(small)
    assert_zero(adm)


def test_release_is_idempotent():
    adm = books()
    a = adm.submit(d())
    adm.release(a)
    adm.release(a)
    assert_zero(adm)


# -- routing -------------------------------------------------------------------
def test_routes_to_the_engine_with_most_room_left():
    adm = books((("e1", 50, 100), ("e2", 100, 100)))
    picks = [adm.submit(d(30, 10)).engine for _ in range(3)]
    # e2 (100 free), e2 (60 free beats 50), then e1 (50 beats e2's 20)
    assert picks == ["e2", "e2", "e1"]


def test_ties_go_to_fewer_in_flight_then_config_order():
    adm = books((("e1", 100, 100), ("e2", 100, 100)))
    a = adm.submit(d(30, 10))
    b = adm.submit(d(30, 10))
    assert (a.engine, b.engine) == ("e1", "e2")


def test_not_ready_and_drained_engines_get_nothing_new():
    adm = books((("e1", 100, 100), ("e2", 100, 100), ("e3", 100, 100)))
    adm.set_ready("e1", False)
    adm.drain("e2")
    assert {adm.submit(d(10, 10)).engine for _ in range(3)} == {"e3"}


def test_drain_keeps_inflight_and_undrain_admits_the_queue():
    adm = books()
    a = adm.submit(d())
    adm.drain("e1")
    b = adm.submit(d())
    assert (a.state, b.state) == (ADMITTED, QUEUED)
    assert adm.undrain("e1") == [b]
    adm.release(a)
    adm.release(b)
    assert_zero(adm)


def test_unknown_upstream():
    adm = books()
    with pytest.raises(UnknownUpstream) as exc:
        adm.drain("nope")
    assert exc.value.message == "unknown upstream 'nope' (known: e1)"


def test_no_engine_ready_queues():
    adm = books(ready=False)
    t = adm.submit(d())
    assert t.state == QUEUED
    assert adm.set_ready("e1", True) == [t]
    adm.release(t)
    assert_zero(adm)


# -- hold ----------------------------------------------------------------------
def test_hold_queues_everything_until_released():
    adm = books()
    adm.hold(30)
    t = adm.submit(d())
    assert t.state == QUEUED and adm.held
    assert adm.release_hold() == [t]
    adm.release(t)
    assert_zero(adm)


def test_hold_runs_out_by_the_clock():
    clock = Clock()
    adm = books(clock=clock)
    adm.hold(10)
    t = adm.submit(d())
    assert adm.pump() == [] and adm.hold_remaining_s() == 10
    clock.now += 10
    assert not adm.held
    assert adm.pump() == [t]
    assert t.wait_s == 10
    adm.release(t)
    assert_zero(adm)


@pytest.mark.parametrize("seconds", [0, -1])
def test_hold_needs_positive_seconds(seconds):
    with pytest.raises(ValueError):
        books().hold(seconds)


# -- shutdown -----------------------------------------------------------------
def test_close_fails_the_queue_and_refuses_new_requests():
    adm = books()
    a, b = adm.submit(d()), adm.submit(d())
    c = adm.submit(d())
    assert adm.close() == [c]
    assert c.state == FAILED and adm.queue_depth == 0
    with pytest.raises(Rejected) as exc:
        adm.submit(d(1, 1))
    assert exc.value.reason == "shutting_down"
    assert adm.release(a) == []  # nothing is admitted after close
    adm.release(b)
    adm.release(c)
    assert_zero(adm)


def test_snapshot():
    clock = Clock()
    adm = books(clock=clock)
    a, b = adm.submit(d()), adm.submit(d())
    c = adm.submit(d(40, 10))
    clock.now += 2.5
    snap = adm.snapshot()
    assert snap["queue"] == {"depth": 1, "max_depth": 8, "oldest_wait_s": 2.5, "head_tokens": 50}
    assert snap["upstreams"]["e1"] == {
        "ready": True, "drained": False, "state": "ready", "detail": "", "inflight": 2, "reserved_tokens": 80,
        "kv_cache_tokens": 100, "max_model_len": 100,
    }
    assert (snap["inflight"], snap["queued"], snap["reserved_tokens"], snap["held"]) == (2, 1, 80, False)
    for t in (c, a, b):
        adm.release(t)
    assert_zero(adm)


def test_engine_states_and_why_none_is_ready():
    adm = books((("e1", 100, 100), ("e2", 100, 100), ("e3", 100, 100)), ready=False)
    assert adm.engines["e1"].state == "not ready"
    adm.set_ready("e1", False, "down", "connection refused at http://h:1")
    adm.set_ready("e2", False, "unhealthy", "/health answered 503 at http://h:2")
    adm.set_ready("e3", True)
    adm.drain("e3")
    assert [e.state for e in adm.engines.values()] == ["down", "unhealthy", "drained"]
    assert adm.none_ready() == ("no engine is ready: e1 is down (connection refused at http://h:1); "
                                "e2 is unhealthy (/health answered 503 at http://h:2); e3 is drained")
    adm.drain("e1")
    assert adm.engines["e1"].describe() == "e1 is down (connection refused at http://h:1) and drained"
    adm.undrain("e3")
    assert adm.none_ready() is None and adm.serving()
    assert adm.not_ready() == ["e1 is down (connection refused at http://h:1) and drained",
                               "e2 is unhealthy (/health answered 503 at http://h:2)"]
    adm.set_ready("e1", True)
    assert (adm.engines["e1"].health, adm.engines["e1"].detail) == ("ready", "")
    assert Admission((("e", 1, 1),), max_queue_depth=1).engines["e"].state == "unknown"


@pytest.mark.parametrize("seed", range(5))
def test_random_operations_keep_the_books_consistent(seed):
    """Any mix of submit/release/drain/hold/readiness: totals equal the
    per-engine sums, no pool is overrun, the queue stays FIFO, and releasing
    everything returns to zero."""
    import random

    rnd = random.Random(seed)
    clock = Clock()
    adm = books((("e1", 100, 100), ("e2", 60, 100), ("e3", 150, 120)), depth=10, clock=clock)
    live: list = []
    order: list = []  # ids in the order they were queued
    for _ in range(2000):
        op = rnd.random()
        if op < 0.45:
            try:
                t = adm.submit(d(rnd.randint(1, 80), rnd.choice([None, rnd.randint(1, 40)]), rnd.randint(1, 2)))
            except Rejected:
                continue
            live.append(t)
            if t.state == QUEUED:
                order.append(t.id)
        elif op < 0.8 and live:
            adm.release(live.pop(rnd.randrange(len(live))))
        elif op < 0.85:
            name = rnd.choice(list(adm.engines))
            adm.drain(name) if rnd.random() < 0.5 else adm.undrain(name)
        elif op < 0.9:
            adm.set_ready(rnd.choice(list(adm.engines)), rnd.random() < 0.7)
        elif op < 0.95:
            adm.hold(rnd.uniform(0.1, 5)) if rnd.random() < 0.5 else adm.release_hold()
        else:
            clock.now += rnd.uniform(0, 3)
            adm.pump()
        engines = adm.engines.values()
        assert adm.reserved_tokens == sum(e.reserved for e in engines)
        assert adm.inflight == sum(e.inflight for e in engines)
        assert all(0 <= e.reserved <= e.kv_cache_tokens for e in engines)
        queued_ids = [t.id for t in adm.queued()]
        assert queued_ids == [i for i in order if i in set(queued_ids)]  # FIFO order kept
        assert adm.queue_depth <= 10
    for t in live:
        adm.release(t)
    assert_zero(adm)


def test_admitted_at_once_waited_exactly_zero():
    """queue_seconds' help says 0 for a request admitted at once: not the
    microseconds between two clock reads, which a busy host stretches."""
    ticks = iter(range(1000, 2000))
    adm = books(clock=lambda: float(next(ticks)))
    t = adm.submit(d())
    assert t.state == ADMITTED and t.wait_s == 0.0
