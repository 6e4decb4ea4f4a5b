# Copyright: vllm-fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The probe's steps: health, quiet check, warm-up, samples, passive window.

``probe`` and ``record`` drive an ``EngineClient`` (client.py) and
return plain dicts for ``library/vllm_prefill_probe.py``; the decision rules
are ``decision.decide`` and ``decision.threshold``. Order of one probe:

1. ``/health``: nothing answering, or not 200, is ``down``.
2. A ``/metrics`` scrape. Requests running or waiting: a second scrape
   ``window`` seconds later gives the passive reading (progress, preemptions,
   the sums' rate: evidence). Until ``PASSIVE_PREFILLS`` prefills finished,
   the window widens by ``window`` at a time up to ``window_max``; it stops at
   once when no token was computed (the wedged sign) or a counter went
   backwards. Then, with ``timed`` (the head times each request itself) and
   nothing waiting, the loaded samples (``_loaded``): a warm-up and 2 (or 4)
   samples the engine timed, judged as quiet ones against the threshold
   widened by ``LOAD_MARGIN``. Otherwise the verdict is ``inconclusive``
   (busy), never ``degraded``.
3. One warm-up (discarded; the first request after idle is slower), taken
   again as a sample is when a lone request lands beside it. No answer
   within ``timeout`` while ``/health`` is 200: ``answered`` is false.
4. Two samples, then two more only if ``decide`` asks. Each is checked quiet
   on both sides; one that is not is taken again while the engine reads quiet
   at once (a lone request, such as a watcher's canary), up to SAMPLE_TRIES
   tries, and otherwise makes the verdict ``inconclusive``.

``keep_baseline`` says whether a baseline already on the host is kept
instead of recording a new one; ``keep_known_good``, whether the one on the
host stays when the baseline just measured after a start of the same
install and model is slower than it.
"""

from __future__ import annotations

import dataclasses
import datetime
import time
import typing as t

from ansible.module_utils.prefill.client import (
    EngineClient,
    EngineTimeout,
    EngineUnreachable,
    NoRequestMetrics,
    NotAlone,
)
from ansible.module_utils.prefill.decision import (
    FLOOR,
    GROUP_SIZE,
    LOAD_MARGIN,
    PASSIVE_PREFILLS,
    SAMPLE_TRIES,
    Baseline,
    comparable,
    decide,
    reference,
    threshold,
)
from ansible.module_utils.prefill.errors import PrefillError
from ansible.module_utils.prefill.metrics import MetricsSnapshot, passive_window


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).replace(microsecond=0).isoformat()


def _passive(client: EngineClient, first: MetricsSnapshot, window: float,
             baseline: Baseline | None, floor: float = FLOOR,
             window_max: float | None = None) -> dict:
    longest = max(window, window_max or window)
    waited = 0.0
    while True:
        step = min(window, longest - waited)
        time.sleep(step)
        waited += step
        second = client.metrics()
        reading = passive_window(first, second)
        progress = _progress(first, second)
        if (waited >= longest or reading.requests is None or reading.requests >= PASSIVE_PREFILLS
                or progress is not True):
            break
    out = {
        "window_s": round(waited, 3),
        "seconds_per_token": reading.seconds_per_token,
        "requests": reading.requests,
        "tokens": reading.tokens,
        "seconds": reading.seconds,
        "preemptions": reading.preemptions,
        "reason": reading.reason,
        "ratio": None,
        "progress": progress,
    }
    done = {"passive": out, "metrics_after": second.as_dict()}
    if baseline is not None:
        limit = threshold(baseline, floor=floor)
        # The diagnosis weighs the passive ratio against this threshold; an
        # upgrade compares its new baseline with this reference.
        done["threshold"] = limit.value
        done["reference"] = limit.reference
        if reading.seconds_per_token is not None:
            out["ratio"] = reading.seconds_per_token / limit.reference
    return done


def _progress(first: MetricsSnapshot, second: MetricsSnapshot) -> bool | None:
    """Whether any token was computed between two scrapes (None: the counters are missing)."""
    moved = []
    for field in ("prompt_tokens", "generation_tokens"):
        a, b = getattr(first, field), getattr(second, field)
        if a is None or b is None:
            return None
        moved.append(b > a)
    return any(moved)


def _quiet(snap: MetricsSnapshot) -> bool:
    return snap.busy is False


def _result(**kw: t.Any) -> dict:
    base = {"verdict": None, "reason": "", "ratio": None, "threshold": None, "samples": [],
            "health_status": None, "answered": None, "busy": None, "passive": None,
            "metrics_before": None, "metrics_after": None, "vllm_version": None,
            "prompt_tokens": None, "timed": None, "passive_judged": None}
    base.update(kw)
    return base


def _start(client: EngineClient) -> tuple[dict | None, MetricsSnapshot | None]:
    """Health and the first scrape; a finished result when the engine is down."""
    try:
        status = client.health()
    except EngineUnreachable as exc:
        return _result(verdict="down", reason="nothing answers at %s: %s" % (client.base, exc)), None
    except EngineTimeout as exc:
        return _result(verdict="down", reason="/health did not answer: %s" % exc), None
    if status != 200:
        return _result(verdict="down", health_status=status,
                       reason="/health answered HTTP %d (503: the engine core died)" % status), None
    return None, client.metrics()


def probe(client: EngineClient, model: str, prompt_tokens: int, baseline: Baseline | None,
          window: float = 5.0, timeout: float = 20.0, floor: float = FLOOR,
          window_max: float | None = None, missing: str = "", timed: bool = False,
          load_margin: float = LOAD_MARGIN) -> dict:
    """One verdict for one engine, from at most 4 samples after a warm-up.

    ``missing``, when there is no baseline, says why (where it was looked for,
    what was wrong with it); the verdict's reason is then that. ``timed``: the
    engine times each request itself, so a loaded engine is sampled too
    (``_loaded``); the result's ``timed`` says whether its samples were.
    """
    done, first = _start(client)
    if done is not None:
        return done
    version = client.version()
    result = _result(health_status=200, metrics_before=first.as_dict(), vllm_version=version,
                     prompt_tokens=prompt_tokens, busy=not _quiet(first))
    if baseline is not None:
        ok, why = comparable(baseline, version, model, prompt_tokens)
        if not ok:
            result.update(_passive(client, first, window, None, floor, window_max))
            return dict(result, verdict="inconclusive", reason=why)
    busy = dict(window=window, window_max=window_max, timeout=timeout, floor=floor, timed=timed,
                load_margin=load_margin)
    if result["busy"]:
        return _busy(client, model, prompt_tokens, baseline, result, first, **busy)
    prompt, counted = client.build_prompt(model, prompt_tokens)
    result["prompt_tokens"] = counted
    try:
        failed = _warm_up(client, model, prompt, timeout)
    except EngineTimeout:
        return dict(result, verdict="inconclusive", answered=False, reason=(
            "/health answers 200 but a one-token completion got no answer in %g s: the engine is wedged"
            % timeout))
    if failed is not None and timed and isinstance(failed, NotAlone):
        # Short requests beside it every time (a chat's next turns): load the first scrape missed.
        return _busy(client, model, prompt_tokens, baseline, dict(result, answered=True), client.metrics(),
                     prompt=(prompt, counted), **busy)
    if failed is not None:
        # busy stays as scraped: a refused or failed completion (401, 500) is not load.
        return dict(result, verdict="inconclusive", answered=True, reason="warm-up: %s" % failed)
    result["answered"] = True
    if baseline is None:
        verdict = decide(None)
        return dict(result, verdict=verdict.verdict, reason=missing or verdict.reason)
    limit = threshold(baseline, floor=floor)
    samples = []
    try:
        for _ in range(2):
            samples.append(_quiet_sample(client, model, prompt, timeout))
        verdict = decide(baseline, [s.seconds_per_token for s in samples], limit=limit)
        if verdict.needs_more:
            for _ in range(GROUP_SIZE - 2):
                samples.append(_quiet_sample(client, model, prompt, timeout))
            verdict = decide(baseline, [s.seconds_per_token for s in samples[:2]],
                             [s.seconds_per_token for s in samples[2:]], limit=limit)
    except EngineTimeout as exc:
        return dict(result, verdict="inconclusive", answered=False, samples=[s.as_dict() for s in samples],
                    reason="a probe got no answer while /health answers 200: %s" % exc)
    except _Busy as exc:
        return _busy(client, model, prompt_tokens, baseline, result, exc.snapshot, prompt=(prompt, counted),
                     quiet_samples=samples, **busy)
    return dict(result, verdict=verdict.verdict, reason=verdict.reason, ratio=verdict.ratio,
                threshold=verdict.threshold, samples=[s.as_dict() for s in samples],
                noise=limit.noise, reference=limit.reference)


def _busy(client: EngineClient, model: str, prompt_tokens: int, baseline: Baseline | None, result: dict,
          snapshot: MetricsSnapshot, window: float, window_max: float | None, timeout: float, floor: float,
          timed: bool, load_margin: float, prompt: tuple[str, int] | None = None,
          quiet_samples: t.Sequence = ()) -> dict:
    """The verdict of a busy engine: the passive reading from ``snapshot`` on, then the loaded
    samples' when the engine times each request and nothing waits, else ``inconclusive`` with the
    reason. ``prompt``: the probe's prompt and its count, when the quiet path built it already.

    ``timed`` says whether samples were taken and judged; ``passive_judged`` whether the diagnosis
    may judge the passive rate instead: only for an engine that does not time its requests (other
    traffic shapes inflate that rate, so an engine that does is never judged by it)."""
    result = dict(result, busy=True, **_passive(client, snapshot, window, baseline, floor, window_max))
    kept = [s.as_dict() for s in quiet_samples]
    why = ("busy: another request ran during the probe; the passive reading stands in" if quiet_samples
           else decide(baseline, busy=True).reason)
    after = result.get("metrics_after") or {}
    waiting = max(snapshot.waiting or 0, after.get("waiting") or 0)
    passive = result.get("passive") or {}
    untimed = dict(result, verdict="inconclusive", timed=False, passive_judged=not timed, samples=kept)
    if not timed:
        return dict(untimed, reason=why)
    if baseline is None:
        return dict(untimed, reason=decide(None).reason)
    if passive.get("progress") is False:
        return dict(untimed, reason="busy, and no token was computed in the window: no sample sent")
    if waiting > 0:
        return dict(untimed, reason=(
            "busy with %d request(s) waiting: a sample would wait behind them, so none was sent and prefill "
            "is not judged under this load" % waiting))
    try:
        built = prompt or client.build_prompt(model, prompt_tokens)
    except PrefillError as exc:
        return dict(untimed, reason="busy, and the probe's prompt could not be built: %s" % exc)
    loaded = _loaded(client, model, built, baseline, timeout, floor, load_margin)
    if "verdict" not in loaded:
        # An engine started without the flag (before vllm_fleet_prefill_timed was set): the passive reading.
        return dict(untimed, passive_judged=loaded.pop("untimed", False), **loaded)
    return dict(result, passive_judged=False, **loaded)


def _loaded(client: EngineClient, model: str, built: tuple[str, int], baseline: Baseline, timeout: float,
            floor: float, load_margin: float) -> dict:
    """Samples of a loaded engine, each timed by the engine itself (``EngineClient.timed_sample``):
    the same fixed work as the baseline's, so they are judged as quiet ones, against the threshold
    widened by ``load_margin`` (traffic only adds rows to a sample's engine step). A dict with the
    verdict's fields, or with only ``reason`` when no verdict could be taken."""
    limit = threshold(baseline, floor=floor)
    widened = dataclasses.replace(limit, value=limit.value * load_margin)
    samples = []
    prompt, counted = built
    try:
        client.timed_sample(model, prompt, timeout)  # the warm-up, discarded
        for _ in range(2):
            samples.append(client.timed_sample(model, prompt, timeout))
        verdict = decide(baseline, [s.seconds_per_token for s in samples], limit=widened)
        if verdict.needs_more:
            for _ in range(GROUP_SIZE - 2):
                samples.append(client.timed_sample(model, prompt, timeout))
            verdict = decide(baseline, [s.seconds_per_token for s in samples[:2]],
                             [s.seconds_per_token for s in samples[2:]], limit=widened)
    except NoRequestMetrics as exc:
        return {"reason": "busy, and %s; the passive reading stands in" % exc, "untimed": True}
    except EngineTimeout as exc:
        return {"reason": "busy, and a sample waited past %g s (%s): prefill is not judged under this load"
                % (timeout, exc)}
    except PrefillError as exc:
        return {"reason": "busy, and a sample failed: %s" % exc}
    reason = "under load, samples timed by the engine: %s (the threshold %.3fx widened by %.2f for load)" % (
        verdict.reason, limit.value, load_margin)
    return {"verdict": verdict.verdict, "reason": reason, "ratio": verdict.ratio, "threshold": verdict.threshold,
            "samples": [dict(s.as_dict(), timed_by="engine") for s in samples], "prompt_tokens": counted,
            "noise": limit.noise, "reference": limit.reference, "timed": True, "load_margin": load_margin}


class _Busy(Exception):
    def __init__(self, snapshot: MetricsSnapshot) -> None:
        super().__init__("busy")
        self.snapshot = snapshot


def _one_sample(client: EngineClient, model: str, prompt: str, timeout: float):
    try:
        sample, before, after = client.sample(model, prompt, timeout=timeout)
    except EngineTimeout:
        raise
    except PrefillError:
        raise _Busy(client.metrics()) from None
    if not _quiet(before) or not _quiet(after):
        raise _Busy(after)
    return sample


def _warm_up(client: EngineClient, model: str, prompt: str, timeout: float,
             tries: int = SAMPLE_TRIES) -> PrefillError | None:
    """The discarded first request (the first after idle is slower). Its figures do not count,
    but its check that the engine's sums moved by exactly this one request does: a lone request
    beside it (a canary, a session's next turn) spoils it, and while the engine reads quiet again
    at once it is taken again, up to ``tries`` times in all, as ``_quiet_sample`` does. None once
    it ran alone, else the last error (a refused or failed completion, or requests beside it every
    time); EngineTimeout passes through."""
    for attempt in range(1, tries + 1):
        try:
            client.sample(model, prompt, timeout=timeout)
            return None
        except EngineTimeout:
            raise
        except PrefillError as exc:
            if attempt == tries or not _quiet(client.metrics()):
                return exc
    raise AssertionError("unreachable")  # pragma: no cover


def _quiet_sample(client: EngineClient, model: str, prompt: str, timeout: float, tries: int = SAMPLE_TRIES):
    """One sample on a quiet engine. A lone request beside it (a watcher's one-token canary,
    every 15 s) spoils that sample only: while the engine reads quiet again at once, the
    sample is taken again, up to ``tries`` times in all. Traffic (still running or waiting
    after it) is busy."""
    for attempt in range(1, tries + 1):
        try:
            return _one_sample(client, model, prompt, timeout)
        except _Busy:
            if attempt == tries or not _quiet(client.metrics()):
                raise
    raise AssertionError("unreachable")  # pragma: no cover


def record(client: EngineClient, model: str, prompt_tokens: int, groups: int = 2,
           timeout: float = 20.0, floor: float = FLOOR) -> tuple[Baseline | None, dict]:
    """Record a baseline of ``groups`` groups of 4 samples; (None, result) when it cannot."""
    done, first = _start(client)
    if done is not None:
        return None, done
    version = client.version()
    result = _result(health_status=200, metrics_before=first.as_dict(), vllm_version=version,
                     prompt_tokens=prompt_tokens, busy=not _quiet(first))
    if result["busy"]:
        return None, dict(result, verdict="inconclusive", reason=(
            "busy: requests were running or waiting, and a baseline must be taken on a quiet engine"))
    prompt, counted = client.build_prompt(model, prompt_tokens)
    result["prompt_tokens"] = counted
    samples = []
    try:
        failed = _warm_up(client, model, prompt, timeout)
        if failed is not None:
            # Requests kept running beside it (consumers back at once after a
            # start), or the completion failed: no baseline, and no failure.
            return None, dict(result, verdict="inconclusive", answered=True, reason="warm-up: %s" % failed)
        for _ in range(groups * GROUP_SIZE):
            samples.append(_quiet_sample(client, model, prompt, timeout))
    except EngineTimeout as exc:
        return None, dict(result, verdict="inconclusive", answered=False, reason=(
            "a probe got no answer while /health answers 200: %s" % exc))
    except _Busy:
        return None, dict(result, verdict="inconclusive", busy=True, samples=[s.as_dict() for s in samples],
                          reason="busy: another request ran while the baseline was taken")
    per_token = [s.seconds_per_token for s in samples]
    baseline = Baseline(version, model, prompt_tokens, _now(),
                        tuple(tuple(per_token[i:i + GROUP_SIZE]) for i in range(0, len(per_token), GROUP_SIZE)))
    limit = threshold(baseline, floor=floor)
    return baseline, dict(result, answered=True, samples=[s.as_dict() for s in samples],
                          threshold=limit.value, noise=limit.noise, reference=limit.reference,
                          too_noisy=limit.too_noisy, reason=limit.reason)


@dataclasses.dataclass(frozen=True)
class Keep:
    """Whether ``mode=baseline`` keeps the baseline it found; ``reason`` says why, or why not."""

    keep: bool
    reason: str
    # keep_known_good: the new measurement over the known-good reference.
    ratio: float | None = None


def keep_baseline(baseline: Baseline | None, started: float | None, model: str, prompt_tokens: int,
                  refresh: bool = False, missing: str = "") -> Keep:
    """Keep ``baseline`` when it was recorded since the unit's start (``started``,
    epoch seconds; None when unknown), for this model and prompt length, and no
    refresh was asked. ``missing`` says why there is no baseline, when there is none.
    """
    if (baseline is not None and started is not None and not refresh
            and datetime.datetime.fromisoformat(baseline.recorded_at).timestamp() >= started
            and baseline.model == model and baseline.prompt_tokens == prompt_tokens):
        return Keep(True, "baseline from %s was recorded since the engine's start" % baseline.recorded_at)
    return Keep(False, missing or "stale")


def keep_known_good(known: Baseline | None, new: Baseline, floor: float = FLOOR) -> Keep:
    """Whether the known-good baseline (the one on the host) stays instead of ``new``, just measured.

    A start of the same install and model is as fast as the known-good start was. A new baseline
    slower past the known one's threshold is a fault that outlived the start (the slow-down a
    restart was meant to cure), not the engine's new normal: recording it would make the
    diagnosis, the cure ledger and the watch compare the slow engine with itself and call it
    healthy. Another version, model or prompt length is not comparable: ``new`` is recorded.
    """
    if known is None:
        return Keep(False, "no baseline before")
    same, why = comparable(known, new.vllm_version, new.model, new.prompt_tokens)
    if not same:
        return Keep(False, why)
    limit = threshold(known, floor=floor)
    ratio = reference(new) / limit.reference
    if ratio < limit.detectable:
        return Keep(False, "%.2fx the known-good baseline from %s, under its threshold %.2fx" % (
            ratio, known.recorded_at, limit.detectable), ratio)
    return Keep(True, (
        "prefill right after the start is %.2fx the known-good baseline from %s (threshold %.2fx): the "
        "slow-down outlived the start, so the known-good baseline stays and the diagnosis keeps reading "
        "the engine against it" % (ratio, known.recorded_at, limit.detectable)), ratio)
