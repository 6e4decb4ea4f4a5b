"""Gate test wiring: the package on sys.path, an in-process fake vLLM, and a
factory that starts a gate in front of fakes and checks, after every test,
that the books are back to zero (nothing reserved, in flight or queued).

Only loopback traffic. Waits are bounded and driven by events, not sleeps.
The fake engine and helpers live in gate_helpers.py.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient, TestServer

# The gate is its own package (gate/). `make venv` installs it editable; the
# path keeps these tests on the clone's code in a venv built before that.
GATE_DIR = Path(__file__).resolve().parents[3] / "gate"
if str(GATE_DIR) not in sys.path:
    sys.path.insert(0, str(GATE_DIR))

from gate_helpers import WAIT, FakeVLLM, base_config, books  # noqa: E402

from vllm_fleet_gate.app import Gate  # noqa: E402
from vllm_fleet_gate.config import parse_config  # noqa: E402


@pytest.fixture(autouse=True)
async def books_back_to_zero():
    """After every test, each gate it started has nothing reserved, in
    flight or queued. The gate factory records the books while its servers
    still run (before teardown could cancel anything); this asserts them."""
    records: list[tuple[Gate, dict]] = []
    yield records
    for gate, held in records:
        assert held == {"reserved_tokens": 0, "inflight": 0, "queue_depth": 0}, (
            f"accounting leak: {held}; state: {gate.state()}"
        )


async def _engines(cls):
    """Yield a factory that starts ``cls`` engines on loopback; then stop
    them all (a held /tokenize let go first)."""
    servers = []

    async def start(**kwargs):
        fake = cls(**kwargs)
        fake.server = TestServer(fake.app(), host="127.0.0.1")
        await fake.server.start_server()
        servers.append(fake)
        return fake

    yield start
    for fake in servers:
        fake.release_all()
        if getattr(fake, "tokenize_pause", None) is not None:
            fake.tokenize_pause.set()
        await fake.server.close()


async def _gates(records: list, *, own_options: bool):
    """Yield a gate factory (see ``start_gate``); then record each gate's
    books in ``records`` and stop the servers. ``own_options``: run the
    server with ``Gate.server_options()``."""
    started: list[tuple[Gate, TestClient]] = []

    async def start(fakes, **overrides):
        gate = Gate(parse_config(base_config(fakes, **overrides)))
        server = TestServer(gate.make_app(), host="127.0.0.1")
        if own_options:
            await server.start_server(**gate.server_options())
        client = TestClient(server)
        await client.start_server()
        started.append((gate, client))
        return gate, client

    yield start
    for gate, _client in started:
        # Let handlers finish releasing what they hold, then record.
        await gate.wait_idle(WAIT)
        records.append((gate, books(gate)))
    for _gate, client in started:
        await client.close()


@pytest.fixture
async def fake_engine():
    """Factory: start a FakeVLLM on loopback."""
    async for start in _engines(FakeVLLM):
        yield start


@pytest.fixture
async def start_gate(books_back_to_zero):
    """Factory: ``await start_gate([fake, ...], **config_overrides)`` returns
    (gate, client). The gate has polled health once, so ready fakes are
    ready."""
    async for start in _gates(books_back_to_zero, own_options=False):
        yield start


@pytest.fixture
async def one(fake_engine, start_gate):
    """The common case: one fake engine, one gate."""
    fake = await fake_engine()
    gate, client = await start_gate([fake])
    return fake, gate, client


@pytest.fixture
async def serve_gate(books_back_to_zero):
    """Factory like ``start_gate``, but the server runs with the gate's own
    server options, as ``__main__`` runs it (``Gate.server_options()``: the
    idle timeout, the server logger): ``await serve_gate([fake], **overrides)``
    returns (gate, client); ``client.server.port`` is its loopback port."""
    async for start in _gates(books_back_to_zero, own_options=True):
        yield start


@pytest.fixture
async def sturdy_engine():
    """Factory: a SturdyFakeVLLM on loopback (see gate_helpers)."""
    from gate_helpers import SturdyFakeVLLM

    async for start in _engines(SturdyFakeVLLM):
        yield start
