"""Tests for plugins/module_utils/shared/polling.py: the wait inside one module call
(a fake clock and sleep, so no test sleeps) and its options, with the exact
messages. The modules that use it are tested in tests/unit/library/
(test_vllm_health_info.py, test_ray_cluster_info.py)."""
from __future__ import annotations

import math

import pytest
from ansible.module_utils.shared.polling import MAX_WAIT_S, PollArgumentError, Poller, validate_poll
from hypothesis import given
from hypothesis import strategies as st


class FakeTime:
    """A clock that moves only when slept on, or when a probe takes time."""

    def __init__(self, start: float = 1000.0):
        self.now = start
        self.sleeps = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds > 0, "never a zero or negative sleep"
        self.sleeps.append(seconds)
        self.now += seconds

    def probe(self, answers, cost: float = 0.0):
        """A probe that takes ``cost`` seconds and answers each of ``answers`` in turn, then the last."""
        answers = list(answers)

        def probe():
            self.now += cost
            return answers.pop(0) if len(answers) > 1 else answers[0]

        return probe


def ready(answer) -> bool:
    return answer in ("ready", "dead")


# --- the wait ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("answers, wait_s, poll_s, cost, answer, polls, sleeps, waited_s", [
    # wait_s 0: one probe, as a plain call did.
    (["loading"], 0, 0.5, 0.2, "loading", 1, [], 0.2),
    (["ready"], 0, 0.5, 0.0, "ready", 1, [], 0.0),
    # Ready on the third poll: two pauses of poll_s after each probe's end.
    (["loading", "loading", "ready"], 30, 0.5, 0.1, "ready", 3, [0.5, 0.5], 1.3),
    # Dead ends the wait as early as ready does.
    (["loading", "dead"], 30, 0.5, 0.0, "dead", 2, [0.5], 0.5),
    # Never ready: one more probe at the deadline, the last pause cut to reach it.
    (["loading"], 1, 0.4, 0.0, "loading", 4, [0.4, 0.4, 0.2], 1.0),
    (["loading"], 2, 0.5, 0.0, "loading", 5, [0.5, 0.5, 0.5, 0.5], 2.0),
    # A pause longer than the wait: one pause, to the deadline.
    (["loading"], 1, 5, 0.0, "loading", 2, [1.0], 1.0),
    # A probe slower than the pause: still a pause between probes, never back to back.
    (["loading", "loading", "ready"], 30, 1.0, 2.5, "ready", 3, [1.0, 1.0], 9.5),
    # A probe begun before the deadline runs to its end: the wait passes wait_s by its time.
    (["loading"], 1, 0.5, 2.0, "loading", 1, [], 2.0),
    (["loading"], 3, 0.5, 2.0, "loading", 2, [0.5], 4.5),
])
def test_poll_until(answers, wait_s, poll_s, cost, answer, polls, sleeps, waited_s):
    fake = FakeTime()
    poller = Poller(wait_s, poll_s, clock=fake.clock, sleep=fake.sleep)
    assert poller.until(fake.probe(answers, cost), ready) == answer
    assert (poller.polls, [round(s, 6) for s in fake.sleeps], poller.waited_s) == (polls, sleeps, waited_s)


def test_done_sees_each_answer_in_turn():
    fake = FakeTime()
    seen = []

    def done(answer):
        seen.append(answer)
        return answer == 3

    poller = Poller(10, 0.5, clock=fake.clock, sleep=fake.sleep)
    assert poller.until(fake.probe([1, 2, 3, 4]), done) == 3
    assert seen == [1, 2, 3]


def test_a_probe_that_fails_midway_sees_how_far_the_wait_got():
    # The module's fail_json exits from inside a probe: its result still says
    # how many polls ran and for how long.
    fake = FakeTime()
    poller = Poller(30, 0.5, clock=fake.clock, sleep=fake.sleep)
    seen = []

    def probe():
        fake.now += 0.25
        seen.append((poller.polls, poller.waited_s))
        if poller.polls == 3:
            raise RuntimeError("systemctl show failed")
        return "loading"

    assert (poller.polls, poller.waited_s) == (0, 0.0)
    with pytest.raises(RuntimeError):
        poller.until(probe, ready)
    assert seen == [(1, 0.25), (2, 1.0), (3, 1.75)]
    assert (poller.polls, poller.waited_s) == (3, 1.75)


def test_waited_s_is_rounded_to_milliseconds():
    fake = FakeTime()
    poller = Poller(0, 0.5, clock=fake.clock, sleep=fake.sleep)
    poller.until(fake.probe(["loading"], cost=0.123456), ready)
    assert poller.waited_s == 0.123


@given(wait_s=st.floats(0, 120), poll_s=st.floats(0.001, 60), costs=st.lists(st.floats(0, 10), min_size=1, max_size=50))
def test_the_wait_is_bounded(wait_s, poll_s, costs):
    """Whatever the probes cost: at least one probe, pauses that add up to no more than
    wait_s, and an end no later than wait_s plus one probe's time."""
    fake = FakeTime()
    costs = list(costs)

    def probe():
        fake.now += costs.pop(0) if len(costs) > 1 else costs[0]
        return "loading"

    poller = Poller(wait_s, poll_s, clock=fake.clock, sleep=fake.sleep)
    poller.until(probe, ready)
    assert poller.polls >= 1
    assert len(fake.sleeps) == poller.polls - 1
    assert all(0.001 <= s <= poll_s for s in fake.sleeps)
    assert sum(fake.sleeps) <= wait_s + 1e-6
    assert poller.waited_s <= wait_s + 10 + 1e-3


# --- options ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("wait_s, poll_s", [(0, 0.5), (0.0, 0.001), (30, 0.5), (MAX_WAIT_S, MAX_WAIT_S), (1.5, 2)])
def test_valid_options(wait_s, poll_s):
    assert validate_poll(wait_s, poll_s) is None


@pytest.mark.parametrize("wait_s, poll_s, msg", [
    (-1, 0.5, "wait_s must be 0 (probe once) or a positive number of seconds, got -1"),
    (-1.0, 0.5, "wait_s must be 0 (probe once) or a positive number of seconds, got -1"),
    (-0.5, 0.5, "wait_s must be 0 (probe once) or a positive number of seconds, got -0.5"),
    (math.nan, 0.5, "wait_s must be 0 (probe once) or a positive number of seconds, got nan"),
    ("30", 0.5, "wait_s must be 0 (probe once) or a positive number of seconds, got a str"),
    (None, 0.5, "wait_s must be 0 (probe once) or a positive number of seconds, got a NoneType"),
    (True, 0.5, "wait_s must be 0 (probe once) or a positive number of seconds, got a bool"),
    (MAX_WAIT_S + 0.5, 0.5, "wait_s must be at most 86400 seconds (a day), got 86400.5"),
    (86401.0, 0.5, "wait_s must be at most 86400 seconds (a day), got 86401"),
    (math.inf, 0.5, "wait_s must be at most 86400 seconds (a day), got inf"),
    (10 ** 40, 0.5, "wait_s must be at most 86400 seconds (a day), got a number of more than 30 digits"),
    (30, 0, "poll_s must be a positive number of seconds, got 0"),
    (30, 0.0, "poll_s must be a positive number of seconds, got 0"),
    (30, -2, "poll_s must be a positive number of seconds, got -2"),
    (30, math.nan, "poll_s must be a positive number of seconds, got nan"),
    (30, "0.5", "poll_s must be a positive number of seconds, got a str"),
    (30, math.inf, "poll_s must be at most 86400 seconds (a day), got inf"),
    (30, 1e20, "poll_s must be at most 86400 seconds (a day), got 1e+20"),
])
def test_bad_options(wait_s, poll_s, msg):
    with pytest.raises(PollArgumentError) as exc:
        validate_poll(wait_s, poll_s)
    assert str(exc.value) == msg


ANY = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=5), st.lists(st.integers()))


@given(wait_s=ANY, poll_s=ANY)
def test_validate_poll_raises_only_its_error(wait_s, poll_s):
    try:
        validate_poll(wait_s, poll_s)
    except PollArgumentError:
        return
    # Accepted: a finite wait in range and a positive, finite pause.
    assert 0 <= wait_s <= MAX_WAIT_S and 0 < poll_s <= MAX_WAIT_S


def test_the_modules_default_pauses_are_valid():
    from ansible.module_utils.host import ray_cluster, vllm_health

    for poll_s in (vllm_health.POLL_S, ray_cluster.POLL_S):
        assert validate_poll(0, poll_s) is None
