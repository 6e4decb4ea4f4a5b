"""The gate's log handler: one write per event-loop turn, nothing lost on
flush, close or a record logged outside a loop."""
from __future__ import annotations

import asyncio
import io
import logging

import pytest

from vllm_fleet_gate.logsink import LoopBatchedHandler


class CountingStream(io.StringIO):
    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def write(self, s: str) -> int:
        self.writes += 1
        return super().write(s)


class BrokenStream:
    def write(self, s: str) -> int:
        raise OSError(32, "Broken pipe")

    def flush(self) -> None:
        pass


@pytest.fixture
def logger():
    log = logging.getLogger("test.logsink")
    log.propagate = False
    log.setLevel(logging.INFO)
    yield log
    for h in list(log.handlers):
        log.removeHandler(h)


def attach(logger: logging.Logger, stream) -> LoopBatchedHandler:
    handler = LoopBatchedHandler(stream)
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    logger.addHandler(handler)
    return handler


async def test_one_turn_is_one_write(logger):
    stream = CountingStream()
    attach(logger, stream)
    for i in range(64):
        logger.info("request %d", i)
    assert stream.getvalue() == ""  # pending until the loop comes round
    await asyncio.sleep(0)
    assert stream.writes == 1
    assert stream.getvalue() == "".join(f"INFO request {i}\n" for i in range(64))


async def test_later_turns_write_again_in_order(logger):
    stream = CountingStream()
    attach(logger, stream)
    logger.info("first")
    await asyncio.sleep(0)
    logger.warning("second")
    logger.info("third")
    await asyncio.sleep(0)
    assert stream.writes == 2
    assert stream.getvalue() == "INFO first\nWARNING second\nINFO third\n"


async def test_flush_and_close_write_what_is_pending(logger):
    stream = CountingStream()
    handler = attach(logger, stream)
    logger.info("before flush")
    handler.flush()
    assert stream.getvalue() == "INFO before flush\n"
    logger.info("before close")
    handler.close()
    assert stream.getvalue() == "INFO before flush\nINFO before close\n"
    await asyncio.sleep(0)  # the scheduled flush finds nothing left
    assert stream.writes == 2


def test_without_a_loop_each_record_is_written_at_once(logger):
    stream = CountingStream()
    attach(logger, stream)
    logger.info("no loop")
    assert stream.getvalue() == "INFO no loop\n"


async def test_a_broken_stream_is_reported_not_raised(logger, monkeypatch):
    handler = attach(logger, BrokenStream())
    reported = []
    monkeypatch.setattr(handler, "handleError", reported.append)
    logger.info("lost")
    await asyncio.sleep(0)
    assert [r.getMessage() for r in reported] == ["lost"]
    logger.info("next")  # the handler keeps working
    await asyncio.sleep(0)
    assert [r.getMessage() for r in reported] == ["lost", "next"]


def test_a_bad_format_is_reported_not_raised(logger, monkeypatch):
    stream = CountingStream()
    handler = attach(logger, stream)
    reported = []
    monkeypatch.setattr(handler, "handleError", reported.append)
    record = logger.makeRecord(logger.name, logging.INFO, __file__, 1, "%d", ("not a number",), None)
    handler.handle(record)
    assert reported == [record] and stream.getvalue() == ""
