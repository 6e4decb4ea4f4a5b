"""Prometheus metrics of the gate.

Counters and histograms are updated as requests pass. Gauges (queue depth,
reservations, in flight, readiness) are read from the admission books at
scrape time, so they can never drift from the accounting.
"""
from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from .admission import Admission

NS = "vllm_fleet_gate"
REJECT_REASONS = (
    "unauthorized",
    "bad_request",
    "too_long",
    "never_fits",
    "queue_full",
    "queue_timeout",
    "shutting_down",
    "no_ready_upstream",
    "request_timeout",
    "malformed_request",
)
UPSTREAM_ERROR_KINDS = ("connect", "timeout", "aborted", "other")
# body: while sending the body; stalled: stopped reading a stream for
# listen.write_timeout_s, and was cut by the gate.
DISCONNECT_STAGES = ("body", "queued", "upstream", "stalled")
TOKENIZE_FALLBACK_REASONS = ("no_ready_upstream", "timeout", "error")

# Queue waits span a few ms (a busy pool) to many minutes (a hold through an
# engine restart); engine times span one short completion to a 1M-token
# prefill.
QUEUE_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 120, 300, 600, 1800)
UPSTREAM_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)

CONTENT_TYPE = CONTENT_TYPE_LATEST


class _StateCollector:
    """Gauges read from the books at scrape time."""

    def __init__(self, admission: Admission, shutting_down: Callable[[], bool]):
        self._adm = admission
        self._shutting_down = shutting_down

    def describe(self):
        return []

    def collect(self):
        adm = self._adm
        g = GaugeMetricFamily(f"{NS}_queue_depth", "Requests waiting for admission.")
        g.add_metric([], adm.queue_depth)
        yield g
        per_upstream = (
            ("reserved_tokens", "KV-cache tokens reserved by admitted requests.", lambda e: e.reserved),
            ("inflight", "Requests admitted and not yet finished.", lambda e: e.inflight),
            ("kv_cache_tokens", "The engine's KV-cache pool from the config.", lambda e: e.kv_cache_tokens),
            ("upstream_ready", "1 when the engine's /health answered 200 at the last poll.", lambda e: int(e.ready)),
            ("upstream_drained", "1 when the engine is drained by the admin API.", lambda e: int(e.drained)),
        )
        for name, doc, get in per_upstream:
            g = GaugeMetricFamily(f"{NS}_{name}", doc, labels=["upstream"])
            for engine in adm.engines.values():
                g.add_metric([engine.name], get(engine))
            yield g
        g = GaugeMetricFamily(f"{NS}_held", "1 while a hold queues every new request.")
        g.add_metric([], int(adm.held))
        yield g
        g = GaugeMetricFamily(f"{NS}_shutting_down", "1 after SIGTERM, while in-flight requests finish.")
        g.add_metric([], int(self._shutting_down()))
        yield g


class Metrics:
    def __init__(self, admission: Admission, shutting_down: Callable[[], bool]):
        self.registry = CollectorRegistry()
        reg = self.registry
        upstreams = list(admission.engines)
        self.admitted = Counter(
            "admitted", "Requests admitted to an engine.", ["upstream"], namespace=NS, registry=reg
        )
        self.rejected = Counter(
            "rejected", "Requests answered by the gate without reaching an engine, by reason.",
            ["reason"], namespace=NS, registry=reg,
        )
        self.upstream_errors = Counter(
            "upstream_errors",
            "Engine failures: connect (refused/unreachable), timeout, aborted (mid-response), other.",
            ["upstream", "kind"], namespace=NS, registry=reg,
        )
        self.client_disconnects = Counter(
            "client_disconnects",
            "Clients that went away while sending the body, while queued or while the engine answered; "
            "stalled: cut by the gate for not reading.",
            ["stage"], namespace=NS, registry=reg,
        )
        self.tokenize_fallbacks = Counter(
            "tokenize_fallbacks", "Requests counted by estimate because the engine's /tokenize failed.",
            ["reason"], namespace=NS, registry=reg,
        )
        self.responses = Counter(
            "responses", "Responses to /v1 requests by HTTP status.", ["code"], namespace=NS, registry=reg
        )
        self.queue_seconds = Histogram(
            "queue_seconds", "Time from arrival to admission (0 when admitted at once).",
            namespace=NS, registry=reg, buckets=QUEUE_BUCKETS,
        )
        self.upstream_seconds = Histogram(
            "upstream_seconds", "Time from sending to an engine to the end of its response.",
            ["upstream"], namespace=NS, registry=reg, buckets=UPSTREAM_BUCKETS,
        )
        self.upstream_first_byte_seconds = Histogram(
            "upstream_first_byte_seconds",
            "Streamed requests: time from sending to the engine's first chunk (prefill time).",
            ["upstream"], namespace=NS, registry=reg, buckets=UPSTREAM_BUCKETS,
        )
        reg.register(_StateCollector(admission, shutting_down))
        # Create every known series at zero, so dashboards and alerts see
        # them before the first event.
        for reason in REJECT_REASONS:
            self.rejected.labels(reason)
        for stage in DISCONNECT_STAGES:
            self.client_disconnects.labels(stage)
        for reason in TOKENIZE_FALLBACK_REASONS:
            self.tokenize_fallbacks.labels(reason)
        # Bound children, so the hot path skips the label lookup.
        self.admitted_by = {u: self.admitted.labels(u) for u in upstreams}
        self.upstream_seconds_by = {u: self.upstream_seconds.labels(u) for u in upstreams}
        self.first_byte_by = {u: self.upstream_first_byte_seconds.labels(u) for u in upstreams}
        for u in upstreams:
            for kind in UPSTREAM_ERROR_KINDS:
                self.upstream_errors.labels(u, kind)
        self._responses_by: dict[int, object] = {}

    def response(self, status: int) -> None:
        child = self._responses_by.get(status)
        if child is None:
            child = self._responses_by[status] = self.responses.labels(str(status))
        child.inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
