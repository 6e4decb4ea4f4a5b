"""The power-cut recovery's two files: recover.json (:class:`Config`, as
roles/engine_recovery templates it) and recover-state.json (:class:`State`, what
the recovery did last, and :func:`summary`, what diagnose reports of it).

Stdlib only: roles/engine_recovery copies this file to each engine host (see
recovery/__init__.py).
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields

SCHEMA = 1
ROLES = ("head", "worker")
BACKENDS = ("ray", "mp")
MODES = ("boot", "check")
# Head phases of one attempt.
IDLE, RAY_STARTED, VLLM_STARTED = "idle", "ray-started", "vllm-started"


class ConfigError(ValueError):
    """recover.json is not what the role writes."""


@dataclass(frozen=True)
class Config:
    """/etc/vllm-fleet/recover.json, as roles/engine_recovery templates it."""
    engine: str
    role: str
    backend: str
    vllm_unit: str
    ray_unit: str
    head_address: str
    ray_port: int
    master_port: int
    peers: tuple = ()
    health_url: str = ""
    api_address: str = ""
    api_port: int = 0
    peer_port: int = 22
    python: str = ""
    user: str = ""
    marker: str = "/var/lib/vllm-fleet/engine-wanted"
    state_file: str = "/var/lib/vllm-fleet/recover-state.json"
    lease_file: str = "/run/vllm-fleet/lease.json"
    max_attempts: int = 3
    backoff_s: float = 30.0
    backoff_max_s: float = 600.0
    peer_wait_s: float = 900.0
    join_timeout_s: float = 180.0
    ready_timeout_s: float = 900.0
    worker_wait_s: float = 3600.0
    poll_s: float = 5.0
    progress_s: float = 30.0
    check_interval_s: float = 30.0
    probe_max_interval_s: float = 480.0

    @property
    def rendezvous_port(self) -> int:
        """The head's port a worker waits for: Ray's GCS, or vLLM's master port (mp)."""
        return self.ray_port if self.backend == "ray" else self.master_port

    @property
    def peers_all(self) -> tuple:
        """Every node of the engine: the head and its peers."""
        return (self.head_address,) + tuple(p for p in self.peers if p != self.head_address)

    @property
    def own_unit(self) -> str:
        """The unit a worker runs: its Ray node, or its headless vLLM (mp)."""
        return self.ray_unit if self.backend == "ray" else self.vllm_unit


REQUIRED = ("engine", "role", "backend", "vllm_unit", "ray_unit", "head_address", "ray_port", "master_port")
_INTS = {"ray_port", "master_port", "peer_port", "max_attempts", "api_port"}
_FLOATS = {"backoff_s", "backoff_max_s", "peer_wait_s", "join_timeout_s", "ready_timeout_s", "worker_wait_s",
           "poll_s", "progress_s", "check_interval_s", "probe_max_interval_s"}


def parse_config(raw) -> Config:
    """recover.json (decoded) as a :class:`Config`; ConfigError says what is wrong."""
    if not isinstance(raw, dict):
        raise ConfigError("recover.json must hold an object")
    known = {f.name for f in fields(Config)}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ConfigError(f"recover.json has unknown keys: {', '.join(unknown)}")
    missing = [key for key in REQUIRED if key not in raw]
    if missing:
        raise ConfigError(f"recover.json lacks {', '.join(missing)}")
    values = dict(raw)
    for key in _INTS:
        if key in values and (isinstance(values[key], bool) or not isinstance(values[key], int)):
            raise ConfigError(f"{key} must be an integer, got {values[key]!r}")
    for key in _FLOATS:
        if key in values:
            if isinstance(values[key], bool) or not isinstance(values[key], (int, float)) or values[key] < 0:
                raise ConfigError(f"{key} must be a number of seconds, 0 or more, got {values[key]!r}")
            values[key] = float(values[key])
    if values["role"] not in ROLES:
        raise ConfigError(f"role must be one of {', '.join(ROLES)}, got {values['role']!r}")
    if values["backend"] not in BACKENDS:
        raise ConfigError(f"backend must be one of {', '.join(BACKENDS)}, got {values['backend']!r}")
    if values.get("max_attempts", 1) < 1:
        raise ConfigError("max_attempts must be 1 or more")
    peers = values.get("peers", ())
    if not isinstance(peers, (list, tuple)) or not all(isinstance(p, str) for p in peers):
        raise ConfigError("peers must be a list of addresses")
    values["peers"] = tuple(peers)
    return Config(**values)




def load_config(text: str) -> Config:
    try:
        raw = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ConfigError(f"recover.json is not JSON: {exc}") from None
    return parse_config(raw)



@dataclass
class State:
    """/var/lib/vllm-fleet/recover-state.json: what the recovery did last, per boot."""
    schema: int = SCHEMA
    boot_id: str = ""
    # Attempts since the engine last served (a served engine resets them).
    attempts: int = 0
    phase: str = IDLE
    phase_since: float = 0.0
    next_attempt_at: float = 0.0
    waiting_since: float = 0.0
    gave_up: bool = False
    # The boot recovery stopped waiting for peers that never answered: the
    # head's check takes it up again once they do (the same boot).
    peers_overdue: bool = False
    last_action: str = ""
    last_reason: str = ""
    last_failure: str = ""
    at: float = 0.0
    # The head's check: 503s in a row, and when it may next ask Ray.
    dead_streak: int = 0
    probe_next_at: float = 0.0
    probe_interval_s: float = 0.0
    # A worker's boot run: the head's vLLM answered 503 while this node waited (a
    # dead engine, which the head's check restarts as a whole), and when its API
    # then closed (that restart began).
    head_seen_dead: bool = False
    head_down_at: float = 0.0
    # Ray node ids while the engine served, keyed by vLLM's systemd InvocationID.
    engine_invocation: str = ""
    engine_nodes: dict = field(default_factory=dict)

    @classmethod
    def from_json(cls, text: str, boot_id: str) -> State:
        """The state of this boot: a file from an earlier boot or unreadable starts afresh,
        except what outlives a boot (the node record: it is keyed by vLLM's own start)."""
        try:
            raw = json.loads(text)
        except (TypeError, ValueError, RecursionError):
            return cls(boot_id=boot_id)
        if not isinstance(raw, dict) or raw.get("schema") != SCHEMA:
            return cls(boot_id=boot_id)
        known = {f.name for f in fields(cls)}
        try:
            state = cls(**{k: v for k, v in raw.items() if k in known})
        except TypeError:
            return cls(boot_id=boot_id)
        defaults = cls()
        for f in fields(cls):
            want, got = type(getattr(defaults, f.name)), getattr(state, f.name)
            ok = isinstance(got, (int, float)) and not isinstance(got, bool) if want is float else \
                isinstance(got, want) and (want is bool or not isinstance(got, bool))
            if not ok:  # a hand-edited or foreign file: start afresh
                return cls(boot_id=boot_id)
        if state.boot_id != boot_id:
            return cls(boot_id=boot_id, attempts=0, engine_invocation=state.engine_invocation,
                       engine_nodes=dict(state.engine_nodes or {}))
        return state

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True, indent=1) + "\n"



def summary(text) -> dict | None:
    """What diagnose reports of a state file's text: None when there is none, else
    {attempts, last_action, last_reason, at, gave_up} (an unreadable file says so)."""
    if text is None:
        return None
    try:
        raw = json.loads(text)
    except (TypeError, ValueError, RecursionError):
        raw = None
    if not isinstance(raw, dict):
        return {"attempts": None, "last_action": "unreadable", "last_reason": "the state file is not JSON",
                "at": None, "gave_up": None}
    def pick(key, kind):
        value = raw.get(key)
        return value if isinstance(value, kind) and not isinstance(value, bool) or kind is bool and \
            isinstance(value, bool) else None
    return {"attempts": pick("attempts", int), "last_action": pick("last_action", str),
            "last_reason": (pick("last_reason", str) or "")[:500], "at": pick("at", (int, float)),
            "gave_up": pick("gave_up", bool)}
