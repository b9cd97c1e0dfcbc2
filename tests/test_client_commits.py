"""odradek's consumer committing and leaving against an ``odradek serve`` subprocess.

What a user of Kafka's Java consumer relies on: close() commits what was consumed and leaves the
group whatever state the member is in; commits are answered without waiting behind a long-poll
fetch; commit errors are fatal or retriable as in Java; ``enable.auto.commit`` commits only what
earlier polls returned.
"""

from __future__ import annotations

import gc
import threading
import time
from typing import Any

import pytest
import trio

from odradek.client import Admin, ClientClosedError, Consumer, NewTopic, NoOffsetForPartition, Producer, TopicPartition
from odradek.client.aio import AsyncConsumer
from odradek.client.coordinator import CommitFailedError, MemberState
from odradek.errors import ErrorCode, KafkaError
from odradek.testing import BrokerProcess, unique_topic

pytestmark = pytest.mark.integration
TIMEOUT_S = 30.0


def _topic_with_records(broker: BrokerProcess, prefix: str, count: int, partitions: int = 1) -> str:
    topic = unique_topic(prefix)
    with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
        assert admin.create_topics([NewTopic(topic, partitions, 1)])[topic] is None
    with Producer({"bootstrap.servers": broker.bootstrap}) as producer:
        for i in range(count):
            producer.send(topic, b"%d" % i, partition=i % partitions)
    return topic


def _poll_count(consumer: Consumer, count: int) -> int:
    got = 0
    deadline = time.monotonic() + TIMEOUT_S
    while got < count and time.monotonic() < deadline:
        got += sum(len(records) for records in consumer.poll(0.5).values())
    return got


def _committed(broker: BrokerProcess, group: str, tps: list[TopicPartition]) -> dict[TopicPartition, Any]:
    with Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group}) as probe:
        return {tp: (c.offset if c is not None else None) for tp, c in probe.committed(tps).items()}


def _members(broker: BrokerProcess, group: str) -> int:
    with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
        description = admin.describe_groups([group])[group]
    return len(description.members)  # type: ignore[union-attr]


# -- close() commits and leaves ---------------------------------------------------------------------


def test_close_commits_consumed_offsets_of_an_assigned_consumer(odradek_broker: BrokerProcess) -> None:
    """assign() with a group.id and auto-commit: close() commits the positions (it raised
    ClientClosedError and committed nothing)."""
    topic = _topic_with_records(odradek_broker, "close-assign", 10)
    tp = TopicPartition(topic, 0)
    group = unique_topic("g")
    consumer = Consumer({"bootstrap.servers": odradek_broker.bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest", "auto.commit.interval.ms": 60_000})  # fmt: skip
    consumer.assign([tp])
    assert _poll_count(consumer, 10) == 10
    consumer.close()
    assert _committed(odradek_broker, group, [tp]) == {tp: 10}


def test_close_mid_rebalance_commits_and_leaves(odradek_broker: BrokerProcess) -> None:
    """A subscribed member closed while a (cooperative) rebalance is under way still commits its
    positions and sends LeaveGroup, so the group does not wait session.timeout.ms for it."""
    topic = _topic_with_records(odradek_broker, "close-rebalance", 10)
    tp = TopicPartition(topic, 0)
    group = unique_topic("g")
    consumer = Consumer({"bootstrap.servers": odradek_broker.bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest", "auto.commit.interval.ms": 60_000,
                         "partition.assignment.strategy": "cooperative-sticky",
                         "session.timeout.ms": 60_000})  # fmt: skip
    consumer.subscribe([topic])
    assert _poll_count(consumer, 10) == 10
    assert _members(odradek_broker, group) == 1
    # what a join task sets while it runs; the generation stays valid until the group completes
    coordinator = consumer._async.coordinator
    consumer._loop().run_sync(lambda: setattr(coordinator, "state", MemberState.REBALANCING))
    consumer.close()
    assert _committed(odradek_broker, group, [tp]) == {tp: 10}
    assert _members(odradek_broker, group) == 0


# -- group and offset requests do not queue behind a long-poll fetch ----------------------------------


def test_commit_committed_and_end_offsets_do_not_wait_for_a_long_poll_fetch(odradek_broker: BrokerProcess) -> None:
    """A caught-up consumer always has a Fetch parked at the broker for fetch.max.wait.ms; the
    broker answers a connection's requests in order, so on a shared connection each commit,
    committed() and end_offsets() waited for it."""
    topic = _topic_with_records(odradek_broker, "longpoll", 3)
    tp = TopicPartition(topic, 0)
    max_wait_ms = 20_000

    async def main() -> None:
        conf = {"bootstrap.servers": odradek_broker.bootstrap, "group.id": unique_topic("g"),
                "auto.offset.reset": "earliest", "enable.auto.commit": False,
                "fetch.max.wait.ms": max_wait_ms, "heartbeat.interval.ms": 1000}  # fmt: skip
        async with AsyncConsumer(conf) as consumer:
            consumer.subscribe([topic])
            got = 0
            with trio.fail_after(TIMEOUT_S):
                while got < 3:
                    got += sum(len(r) for r in (await consumer.poll(1.0)).values())
                while not consumer.fetcher._in_flight_nodes:  # the caught-up long poll is parked
                    await trio.sleep(0.01)
            # every call below would wait max_wait_ms behind the parked fetch on one connection
            with trio.fail_after(max_wait_ms / 1000.0 / 2):
                for _ in range(3):
                    await consumer.commit()
                    assert (await consumer.committed([tp]))[tp].offset == 3  # type: ignore[union-attr]
                    assert await consumer.end_offsets([tp]) == {tp: 3}

    trio.run(main)


# -- auto.offset.reset=none ---------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["assign", "subscribe"])
def test_no_offset_for_partition_is_raised_by_every_poll_until_a_seek(odradek_broker: BrokerProcess, mode: str) -> None:
    """Raised once, then every poll returned {} and position() timed out: a silent stall."""
    topic = _topic_with_records(odradek_broker, "reset-none", 5)
    tp = TopicPartition(topic, 0)
    conf = {"bootstrap.servers": odradek_broker.bootstrap, "group.id": unique_topic("g"), "auto.offset.reset": "none"}
    with Consumer(conf) as consumer:
        if mode == "assign":
            consumer.assign([tp])
        else:
            consumer.subscribe([topic])
        for _ in range(3):
            with pytest.raises(NoOffsetForPartition, match=f"{topic}-0"):
                consumer.poll(TIMEOUT_S)
        with pytest.raises(NoOffsetForPartition):
            consumer.position(tp, timeout=TIMEOUT_S)
        consumer.seek(tp, 2)
        assert consumer.position(tp) == 2
        assert _poll_count(consumer, 3) == 3


# -- commit errors: Java's retriable and fatal ones -----------------------------------------------------


def test_commit_of_a_partition_the_cluster_lacks_fails_at_once(odradek_broker: BrokerProcess) -> None:
    """UNKNOWN_TOPIC_OR_PARTITION was retried for default.api.timeout.ms; a partition the
    metadata confirms missing (a deleted topic, one recreated smaller) now fails the commit."""
    topic = _topic_with_records(odradek_broker, "commit-missing", 1)
    timeout_ms = 20_000

    async def main() -> None:
        conf = {"bootstrap.servers": odradek_broker.bootstrap, "group.id": unique_topic("g"),
                "default.api.timeout.ms": timeout_ms}  # fmt: skip
        async with AsyncConsumer(conf) as consumer:
            with trio.fail_after(timeout_ms / 1000.0 / 2), pytest.raises(KafkaError) as info:
                await consumer.commit({TopicPartition(topic, 5): 3})
            assert info.value.code is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            assert f"{topic}-5 does not exist" in str(info.value)
            await consumer.commit({TopicPartition(topic, 0): 1})  # the partition that exists
            assert (await consumer.committed([TopicPartition(topic, 0)]))[TopicPartition(topic, 0)] is not None

    trio.run(main)


# -- the facade closed from another thread ------------------------------------------------------------


def test_close_from_another_thread_makes_a_blocked_poll_raise_client_closed(odradek_broker: BrokerProcess) -> None:
    """The blocked poll() raised trio.Cancelled, a BaseException that ends the calling thread."""
    topic = _topic_with_records(odradek_broker, "close-thread", 1)
    consumer = Consumer({"bootstrap.servers": odradek_broker.bootstrap, "auto.offset.reset": "latest"})
    consumer.assign([TopicPartition(topic, 0)])
    assert consumer.poll(0.5) == {}
    outcome: list[BaseException | None] = []
    started = threading.Event()

    def blocked_poll() -> None:
        started.set()
        try:
            consumer.poll(TIMEOUT_S * 10)
            outcome.append(None)
        except BaseException as exc:  # what the thread would die of
            outcome.append(exc)

    worker = threading.Thread(target=blocked_poll)
    worker.start()
    started.wait()
    time.sleep(0.2)  # let the poll reach its wait (the close must not depend on it)
    consumer.close()
    worker.join(TIMEOUT_S)
    assert not worker.is_alive()
    assert len(outcome) == 1 and isinstance(outcome[0], ClientClosedError), outcome


# -- enable.auto.commit commits what earlier polls returned -------------------------------------------


def test_auto_commit_commits_only_records_of_earlier_polls(odradek_broker: BrokerProcess) -> None:
    """Java's semantics: the auto-commit runs inside poll() and commits the positions after the
    records earlier polls returned, never records the application is still processing (a
    background timer committed them, so a crash mid-processing skipped them)."""
    topic = _topic_with_records(odradek_broker, "autocommit", 30)
    tp = TopicPartition(topic, 0)
    group = unique_topic("g")
    with Consumer({"bootstrap.servers": odradek_broker.bootstrap, "group.id": group,
                   "auto.offset.reset": "earliest", "auto.commit.interval.ms": 50,
                   "max.poll.records": 10}) as consumer:  # fmt: skip
        consumer.subscribe([topic])
        first: list[Any] = []
        deadline = time.monotonic() + TIMEOUT_S
        while not first and time.monotonic() < deadline:
            first = consumer.poll(0.5).get(tp, [])
        assert [r.offset for r in first] == list(range(10))
        time.sleep(1.0)  # "processing" for many auto.commit.interval.ms, without polling
        assert consumer.committed([tp])[tp] is None
        second = consumer.poll(TIMEOUT_S)[tp]  # this poll commits the first poll's records
        assert second[0].offset == 10
        while consumer.committed([tp])[tp] is None and time.monotonic() < deadline:
            time.sleep(0.05)
        committed = consumer.committed([tp])[tp]
        assert committed is not None and committed.offset == 10


# -- arguments Java refuses; commits by a consumer that left its group -----------------------------------


def test_negative_seek_offset_and_record_timestamp_are_refused(odradek_broker: BrokerProcess) -> None:
    topic = _topic_with_records(odradek_broker, "negative", 1)
    tp = TopicPartition(topic, 0)
    with Consumer({"bootstrap.servers": odradek_broker.bootstrap}) as consumer:
        consumer.assign([tp])
        with pytest.raises(ValueError, match="seek offset must be >= 0"):
            consumer.seek(tp, -5)
        consumer.seek(tp, 0)
        assert consumer.position(tp) == 0
    with Producer({"bootstrap.servers": odradek_broker.bootstrap}) as producer:
        with pytest.raises(ValueError, match="invalid timestamp -5"):
            producer.send(topic, b"v", timestamp=-5)
        assert producer.send(topic, b"v", timestamp=0).result(TIMEOUT_S).timestamp == 0


def test_commit_after_leaving_for_max_poll_interval_raises_commit_failed(odradek_broker: BrokerProcess) -> None:
    """A consumer that left the group (poll() not called within max.poll.interval.ms) committed
    as a non-member: accepted by an empty group (rewinding offsets it no longer owns), a bare
    UNKNOWN_MEMBER_ID otherwise. Java raises CommitFailedException explaining the poll interval."""
    topic = _topic_with_records(odradek_broker, "zombie", 10)
    tp = TopicPartition(topic, 0)
    group = unique_topic("g")
    conf = {"bootstrap.servers": odradek_broker.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
            "enable.auto.commit": False, "max.poll.interval.ms": 1000, "heartbeat.interval.ms": 100}  # fmt: skip
    with Consumer(conf) as consumer:
        consumer.subscribe([topic])
        assert _poll_count(consumer, 10) == 10
        coordinator = consumer._async.coordinator
        deadline = time.monotonic() + TIMEOUT_S
        while coordinator.state is not MemberState.UNJOINED and time.monotonic() < deadline:
            time.sleep(0.05)  # no poll(): the heartbeat task leaves the group after 1 s
        assert coordinator.state is MemberState.UNJOINED
        with pytest.raises(CommitFailedError, match="max.poll.interval.ms=1000"):
            consumer.commit()
        assert consumer.committed([tp])[tp] is None


# -- a facade dropped without close() -------------------------------------------------------------------


@pytest.mark.parametrize("role", ["producer", "consumer"])
def test_a_facade_garbage_collected_without_close_ends_its_thread(odradek_broker: BrokerProcess, role: str) -> None:
    """Each unclosed facade kept its daemon thread and its sockets for ever."""
    topic = _topic_with_records(odradek_broker, "unclosed", 1)
    client: Any
    if role == "producer":
        client = Producer({"bootstrap.servers": odradek_broker.bootstrap})
        client.send(topic, b"v").result(TIMEOUT_S)
    else:
        client = Consumer({"bootstrap.servers": odradek_broker.bootstrap})
        assert topic in client.list_topics()
    thread = client._thread._thread
    assert thread.is_alive()
    del client
    gc.collect()
    thread.join(TIMEOUT_S)
    assert not thread.is_alive()
