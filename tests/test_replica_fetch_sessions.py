"""Followers fetch in incremental fetch sessions (KIP-227), as Kafka's replica fetchers do.

The session handler is sans-IO (what each request states, how answers and failures move the
session on) and is tested here without a broker; then a follower's replica fetcher copies a
leader through the leader's real Fetch handler (``Dispatcher.process``: request bytes in,
response bytes out), where the session must open, carry only what changed, and recover when the
leader loses it."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import pytest
import trio
from broker_harness import batch, produce, running_broker
from test_replication_unit import _broker_7, _fetcher_from_7

from odradek.broker.api import CreatableTopic
from odradek.broker.core import BrokerCore
from odradek.client.fetch_session_handler import (
    INITIAL_EPOCH,
    INVALID_SESSION_ID,
    FetchSessionHandler,
    PartitionData,
    next_epoch,
)
from odradek.errors import ErrorCode
from odradek.interfaces import Endpoint, TopicPartition
from odradek.plugins.transport_tcp.apis import Dispatcher
from odradek.protocol import ApiKey, decode_response, encode_request, parse_request_header

A0, A1, B0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)


def _data(offset: int, start: int = 0, epoch: int = 0) -> PartitionData:
    return PartitionData(offset, start, 1 << 20, epoch)


# -- the handler, sans IO ------------------------------------------------------------------------


def test_a_full_fetch_opens_the_session_and_then_only_changes_are_sent() -> None:
    handler = FetchSessionHandler("broker 7")
    first = handler.build({A0: _data(0), A1: _data(0), B0: _data(0)})
    assert (first.session_id, first.epoch, first.incremental) == (INVALID_SESSION_ID, INITIAL_EPOCH, False)
    assert list(first.to_send) == [A0, A1, B0] and first.forgotten == []
    assert handler.handle_response(ErrorCode.NONE, 42, [A0, A1, B0])
    assert (handler.session_id, handler.epoch) == (42, 1)

    # a-0 got records (new fetch offset), b-0's log start moved; a-1 is idle
    second = handler.build({A0: _data(5), A1: _data(0), B0: _data(0, start=3)})
    assert (second.session_id, second.epoch) == (42, 1)
    assert list(second.to_send) == [A0, B0] and second.forgotten == []
    assert second.fetched[A1] == _data(0)  # still fetched: the leader holds it in the session
    assert handler.handle_response(ErrorCode.NONE, 42, [A0])
    assert handler.epoch == 2

    # b-0 leaves (its leader moved): forgotten; a leader epoch change is a change too
    third = handler.build({A0: _data(5, epoch=1), A1: _data(0)})
    assert list(third.to_send) == [A0] and third.forgotten == [B0]
    assert handler.handle_response(ErrorCode.NONE, 42, [])
    assert set(handler.session) == {A0, A1} and handler.epoch == 3


def test_a_broker_without_room_for_a_session_gets_full_fetches() -> None:
    handler = FetchSessionHandler("broker 7")
    handler.build({A0: _data(0)})
    assert handler.handle_response(ErrorCode.NONE, INVALID_SESSION_ID, [A0])
    again = handler.build({A0: _data(1)})
    assert (again.session_id, again.epoch, list(again.to_send)) == (INVALID_SESSION_ID, INITIAL_EPOCH, [A0])


@pytest.mark.parametrize(
    ("error", "reused_id"),
    [(ErrorCode.FETCH_SESSION_ID_NOT_FOUND, INVALID_SESSION_ID), (ErrorCode.INVALID_FETCH_SESSION_EPOCH, 42)],
)
def test_a_session_error_starts_over_with_a_full_fetch(error: ErrorCode, reused_id: int) -> None:
    """An unknown session is gone; a wrong epoch may still be held by the broker, and a full
    fetch naming it closes it there (Kafka's nextCloseExisting)."""
    handler = FetchSessionHandler("broker 7")
    handler.build({A0: _data(0), A1: _data(0)})
    handler.handle_response(ErrorCode.NONE, 42, [A0, A1])
    handler.build({A0: _data(1), A1: _data(0)})
    assert not handler.handle_response(error, 0, [])
    full = handler.build({A0: _data(1), A1: _data(0)})
    assert (full.session_id, full.epoch, list(full.to_send)) == (reused_id, INITIAL_EPOCH, [A0, A1])


def test_an_answer_outside_the_session_is_not_used() -> None:
    handler = FetchSessionHandler("broker 7")
    handler.build({A0: _data(0)})
    handler.handle_response(ErrorCode.NONE, 42, [A0])
    handler.build({A0: _data(1)})
    assert not handler.handle_response(ErrorCode.NONE, 42, [B0])
    full = handler.build({A0: _data(1)})
    assert (full.session_id, full.epoch) == (42, INITIAL_EPOCH)


def test_a_failed_request_closes_the_session_with_the_next_full_fetch() -> None:
    handler = FetchSessionHandler("broker 7")
    handler.build({A0: _data(0)})
    handler.handle_response(ErrorCode.NONE, 42, [A0])
    handler.build({A0: _data(1)})
    handler.handle_error()
    full = handler.build({A0: _data(1)})
    assert (full.session_id, full.epoch, list(full.to_send)) == (42, INITIAL_EPOCH, [A0])
    with pytest.raises(RuntimeError):
        FetchSessionHandler("x").handle_response(ErrorCode.NONE, 1, [])


def test_the_epoch_wraps_past_int32_max_to_one() -> None:
    assert next_epoch(2**31 - 1) == 1 and next_epoch(1) == 2


# -- a follower against a real leader's Fetch handler --------------------------------------------


class _WireConnection:
    """A replica fetcher's connection whose requests go through the leader's dispatcher as
    bytes (so the leader's fetch sessions apply), as follower 7 of the leader."""

    def __init__(self, leader: BrokerCore) -> None:
        self.dispatcher = Dispatcher(leader, leader.config, Endpoint("PLAINTEXT", "127.0.0.1", 9092))
        self.sent: list[Any] = []
        self.answers: list[Any] = []
        self.fail_next = False
        self._correlation = 0

    def version(self, api_key: int, **_: Any) -> int:
        return {ApiKey.FETCH: 11, ApiKey.OFFSET_FOR_LEADER_EPOCH: 3}[ApiKey(api_key)]

    async def request(self, request: Any, *, timeout_s: float) -> Any:
        request = dataclasses.replace(request, replica_id=7)
        self.sent.append(request)
        self._correlation += 1
        frame = bytearray(encode_request(request, correlation_id=self._correlation, client_id="broker-0-fetcher"))
        outcome = await self.dispatcher.process(parse_request_header(frame), frame, "follower")
        if self.fail_next:  # the connection broke after the leader took the request in
            self.fail_next = False
            raise trio.BrokenResourceError("connection lost")
        assert outcome is not None and not isinstance(outcome, bytes)
        wire = outcome.to_bytes()
        outcome.release()
        _, response = decode_response(int(request.__api_key__), int(request.__version__), wire[4:])
        self.answers.append(response)
        return response


def _named(request: Any) -> list[str]:
    return [f"{t.topic}-{p.partition}" for t in request.topics for p in t.partitions]


async def test_a_follower_copies_its_leader_through_one_session(tmp_path: Path) -> None:
    async with (
        running_broker(tmp_path / "L", **{"replica.lag.time.max.ms": 30000}) as leader,
        _broker_7(leader, tmp_path / "L"),
        running_broker(tmp_path / "F") as follower,
        _broker_7(follower, tmp_path / "F"),
    ):
        for core, replicas in ((leader, [0, 7]), (follower, [7, 0])):
            for name, count in (("a", 2), ("b", 1)):
                topic = CreatableTopic(name, assignments={i: replicas for i in range(count)})
                assert (await core.create_topics([topic], 1000, False))[name].error == ErrorCode.NONE
        followed = {tp: follower.replica_manager.get_partition(tp) for tp in (A0, A1, B0)}
        assert all(p is not None for p in followed.values())
        fetcher = _fetcher_from_7(follower, followed[A0])  # type: ignore[arg-type]
        fetcher.set_partitions({tp: p.leader_epoch for tp, p in followed.items() if p is not None})
        for state in fetcher.partitions.values():
            state.truncating = False
        conn = _WireConnection(leader)

        assert (await produce(leader, B0, batch([b"b0"]), acks=1)).error == ErrorCode.NONE
        await fetcher._fetch(conn)  # full: opens the session
        opened = conn.answers[-1].session_id
        assert opened != INVALID_SESSION_ID and conn.sent[-1].session_epoch == INITIAL_EPOCH
        assert sorted(_named(conn.sent[-1])) == ["a-0", "a-1", "b-0"]
        assert leader.fetch_sessions.sessions[opened].privileged  # a follower's session

        for i in range(3):  # records on a-0 only: a-1 stays out of every request and answer
            assert (await produce(leader, A0, batch([b"x%d" % i]), acks=1)).error == ErrorCode.NONE
            await fetcher._fetch(conn)
            request, answer = conn.sent[-1], conn.answers[-1]
            assert (request.session_id, answer.session_id) == (opened, opened)
            assert request.session_epoch == i + 1
            answered = {f"{t.topic}-{p.partition_index}" for t in answer.responses for p in t.partitions}
            assert "a-0" in answered and "a-1" not in answered
        # what a request names is what moved on the follower: b-0's fetch offset once (its
        # record came in the full fetch), then a-0's after each record; a-1 never
        assert [_named(r) for r in conn.sent[1:]] == [["b-0"], ["a-0"], ["a-0"]]
        assert {tp: p.log_end_offset for tp, p in followed.items() if p is not None} == {A0: 3, A1: 0, B0: 1}
        # the leader's high watermarks follow the follower's fetch offsets and reach the
        # follower in later answers, which carry a partition again once its HW moved
        with trio.fail_after(5):
            while any(p is not None and p.high_watermark != p.log_end_offset for p in followed.values()):
                await fetcher._fetch(conn)
                assert all(not _named(r) or "a-1" not in _named(r) for r in conn.sent[1:])
        assert all("a-1" not in {t.topic + "-" + str(p.partition_index) for t in a.responses for p in t.partitions}
                   for a in conn.answers[1:])  # fmt: skip

        # the leader lost the session (evicted, restarted): the next fetch is told so, the one
        # after opens a new session with every partition, and nothing is missed meanwhile
        leader.fetch_sessions.sessions.clear()
        assert (await produce(leader, A1, batch([os.urandom(100)]), acks=1)).error == ErrorCode.NONE
        await fetcher._fetch(conn)
        assert conn.answers[-1].error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
        await fetcher._fetch(conn)
        assert conn.sent[-1].session_id == INVALID_SESSION_ID and conn.sent[-1].session_epoch == INITIAL_EPOCH
        reopened = conn.answers[-1].session_id
        assert reopened not in (INVALID_SESSION_ID, opened)
        assert followed[A1] is not None and followed[A1].log_end_offset == 1

        # a connection lost after the leader took a request in: the next full fetch names the
        # session, which closes it on the leader, and opens another
        assert (await produce(leader, A0, batch([b"y"]), acks=1)).error == ErrorCode.NONE
        conn.fail_next = True
        with pytest.raises(trio.BrokenResourceError):
            await fetcher._fetch(conn)
        await fetcher._fetch(conn)
        assert (conn.sent[-1].session_id, conn.sent[-1].session_epoch) == (reopened, INITIAL_EPOCH)
        assert reopened not in leader.fetch_sessions.sessions
        assert len(leader.fetch_sessions.sessions) == 1
        assert followed[A0] is not None and followed[A0].log_end_offset == 4
