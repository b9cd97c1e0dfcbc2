"""Unit tests (no sockets) of the KIP-664 tooling: ListTransactions' filters, DescribeTransactions
from the coordinator (ownership, loading, unknown ids, partitions still waiting for markers), and
DescribeProducers from the broker core."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import trio
from broker_harness import batch, create, produce, running_broker
from test_txn_coordinator import Markers, coordinator

from odradek.broker.api import ActiveProducer
from odradek.broker.txn.listing import STATE_BY_NAME, describe_transaction, list_transactions
from odradek.broker.txn.state import TransactionMetadata, TransactionState
from odradek.errors import ErrorCode
from odradek.interfaces import TopicPartition

TP0, TP1 = TopicPartition("t", 0), TopicPartition("t", 1)


def _md(tid: str, pid: int, state: TransactionState, start: int = -1) -> TransactionMetadata:
    return TransactionMetadata(tid, pid, 0, 60000, state, {TP0} if start >= 0 else set(), txn_start_ms=start)


def test_state_names_are_kafkas() -> None:
    assert sorted(STATE_BY_NAME) == sorted(
        [
            "Empty",
            "Ongoing",
            "PrepareCommit",
            "PrepareAbort",
            "CompleteCommit",
            "CompleteAbort",
            "Dead",
            "PrepareEpochFence",
        ]
    )


def test_list_filters_by_state_producer_and_duration() -> None:
    txns = [
        _md("a", 1, TransactionState.ONGOING, start=1000),
        _md("b", 2, TransactionState.EMPTY),
        _md("c", 3, TransactionState.PREPARE_ABORT, start=9000),
        _md("dead", 4, TransactionState.DEAD),
    ]
    everything = list_transactions(txns, (), (), -1, now_ms=10_000)
    assert [(t.transactional_id, t.producer_id, t.state) for t in everything.transactions] == [
        ("a", 1, "Ongoing"),
        ("b", 2, "Empty"),
        ("c", 3, "PrepareAbort"),
    ]  # Dead ids are on their way out: never listed
    by_state = list_transactions(txns, ("Ongoing", "PrepareAbort", "ongoing", "Bogus"), (), -1, 10_000)
    assert [t.transactional_id for t in by_state.transactions] == ["a", "c"]
    assert by_state.unknown_state_filters == ("ongoing", "Bogus")  # names are case-sensitive, as Kafka's
    assert [t.transactional_id for t in list_transactions(txns, (), (2, 3), -1, 10_000).transactions] == ["b", "c"]
    # running longer than 5 s: "a" (9 s); "c" (1 s) not; "b" has no start time (-1) and passes, as in Kafka
    assert [t.transactional_id for t in list_transactions(txns, (), (), 5000, 10_000).transactions] == ["a", "b"]
    only_unknown = list_transactions(txns, ("Nope",), (), -1, 10_000)
    assert only_unknown.transactions == () and only_unknown.unknown_state_filters == ("Nope",)


def test_list_filters_by_a_pattern_the_whole_id_matches() -> None:
    """ListTransactions v2 (KIP-1152): an RE2 pattern, anchored at both ends (Kafka's
    ``matches()``), ANDed with the other filters; null or empty is no filter."""
    txns = [
        _md("orders-1", 1, TransactionState.ONGOING),
        _md("orders-2", 2, TransactionState.EMPTY),
        _md("my-orders-3", 3, TransactionState.ONGOING),
    ]

    def ids(pattern: str | None, states: tuple[str, ...] = ()) -> list[str]:
        result = list_transactions(txns, states, (), -1, 10_000, pattern)
        assert result.error == ErrorCode.NONE
        return [t.transactional_id for t in result.transactions]

    assert ids("orders-.*") == ["orders-1", "orders-2"]  # not "my-orders-3": the whole id must match
    assert ids(".*orders-[13]") == ["orders-1", "my-orders-3"]
    assert ids("orders-.*", ("Ongoing",)) == ["orders-1"]
    assert ids(None) == ids("") == ["orders-1", "orders-2", "my-orders-3"]
    assert ids(r"\p{L}+-\d") == ["orders-1", "orders-2"]  # RE2's classes, which Python's re lacks


@pytest.mark.parametrize("bad", ["(orders", "(a)\\1", "a{2,1}"])
def test_a_pattern_re2_refuses_is_invalid_regular_expression(bad: str) -> None:
    result = list_transactions([_md("a", 1, TransactionState.EMPTY)], (), (), -1, 10_000, bad)
    assert result.error == ErrorCode.INVALID_REGULAR_EXPRESSION and result.transactions == ()


def test_a_pattern_cannot_hold_the_broker() -> None:
    """``(a+)+$`` on a long id of a's ending otherwise backtracks exponentially in Python's ``re``;
    RE2 matches in time linear in the id."""
    long_id = "a" * 100_000 + "!"
    started = time.process_time()
    result = list_transactions([_md(long_id, 1, TransactionState.EMPTY)], (), (), -1, 10_000, "(a+)+$")
    assert result.transactions == ()
    assert time.process_time() - started < 5  # exponential would be forever; linear is milliseconds


def test_describe_lists_partitions_and_dead_ids_are_not_found() -> None:
    md = TransactionMetadata("a", 7, 3, 60000, TransactionState.ONGOING, {TP1, TP0}, txn_start_ms=123)
    d = describe_transaction(md)
    assert (d.error, d.state, d.timeout_ms, d.start_time_ms, d.producer_id, d.producer_epoch) == (
        ErrorCode.NONE,
        "Ongoing",
        60000,
        123,
        7,
        3,
    )
    assert d.partitions == (TP0, TP1)
    assert describe_transaction(md, unmarked={TP1}).partitions == (TP1,)
    dead = describe_transaction(_md("x", 1, TransactionState.DEAD))
    assert dead.error == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND and dead.state == "" and dead.producer_id == 0


async def test_coordinator_describes_and_lists_only_what_it_owns() -> None:
    markers = Markers()
    async with coordinator(markers=markers) as coord:
        r = await coord.init_producer_id("a", 60000)
        await coord.add_partitions("a", r.producer_id, r.producer_epoch, [TP0, TP1])
        d = coord.describe_transaction("a")
        assert (d.error, d.state, d.producer_id, d.partitions) == (ErrorCode.NONE, "Ongoing", r.producer_id, (TP0, TP1))
        assert d.start_time_ms >= 0
        assert coord.describe_transaction("never-used").error == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
        assert coord.describe_transaction("").error == ErrorCode.INVALID_REQUEST
        listed = coord.list_transactions(("Ongoing",))
        assert [(t.transactional_id, t.state) for t in listed.transactions] == [("a", "Ongoing")]
        # while markers are pending, only the partitions still without one are described
        markers.fail = {TP1}
        async with trio.open_nursery() as nursery:
            nursery.start_soon(coord.end_transaction, "a", r.producer_id, r.producer_epoch, False)
            while coord.describe_transaction("a").partitions != (TP1,):
                await trio.sleep(0.01)
            assert coord.describe_transaction("a").state == "PrepareAbort"
            markers.fail = set()
        assert coord.describe_transaction("a").state == "CompleteAbort"
        # another broker's partition: NOT_COORDINATOR; one being loaded: COORDINATOR_LOAD_IN_PROGRESS
        p = coord.partition_for("a")
        coord.owned.discard(p)
        assert coord.describe_transaction("a").error == ErrorCode.NOT_COORDINATOR
        assert coord.list_transactions().transactions == ()  # ids of partitions it does not lead
        coord.loading.add(p)
        assert coord.describe_transaction("a").error == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        assert coord.list_transactions().error == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        coord.loading.discard(p)
        coord.owned.add(p)
    assert coord.list_transactions().error == ErrorCode.COORDINATOR_NOT_AVAILABLE  # stopped
    assert coord.describe_transaction("a").error == ErrorCode.COORDINATOR_NOT_AVAILABLE


async def test_describe_producers_from_the_core(tmp_path: Path) -> None:
    async with running_broker(tmp_path) as core:
        await create(core, "t", partitions=1)
        tp = TopicPartition("t", 0)
        assert (
            await produce(core, tp, batch([b"a", b"b"], producer_id=42, producer_epoch=3, base_sequence=0))
        ).error == (ErrorCode.NONE)
        results = await core.describe_producers(
            [tp, TopicPartition("t", 5), TopicPartition("nope", 0), TopicPartition("bad name", 0)]
        )
        (producer,) = results[tp].active_producers
        assert producer == ActiveProducer(42, 3, 1, producer.last_timestamp, -1, -1)
        assert producer.last_timestamp > 0 and results[tp].error == ErrorCode.NONE
        assert results[TopicPartition("t", 5)].error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert results[TopicPartition("nope", 0)].error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert results[TopicPartition("bad name", 0)].error == ErrorCode.INVALID_TOPIC_EXCEPTION
        assert "illegal" in (results[TopicPartition("bad name", 0)].error_message or "")
