"""KIP-664's transaction tooling with unmodified clients against an ``odradek serve`` subprocess:
kafka-python's ``list_transactions``, ``describe_transactions``, ``describe_producers``,
``find_hanging_transactions`` and ``abort_transaction`` (WriteTxnMarkers sent by a client),
over a transaction a confluent-kafka producer left open when its process died.

How the hanging transaction arises: a transactional producer with a long
``transaction.timeout.ms`` (the broker's maximum, 15 minutes) commits one transaction, opens a
second, writes two records, and its process is killed (SIGKILL: no EndTxn, no close). The
partition's last stable offset stays at the open transaction's first offset, so read_committed
consumers stop there, and the coordinator keeps it Ongoing until the timeout: exactly what an
operator sees before reaching for ``kafka-transactions.sh find-hanging`` / ``abort``.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from client_helpers import TIMEOUT_S, consume
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaAdminClient, KafkaConsumer
from kafka import TopicPartition as KTP
from kafka.admin._transactions import AbortTransactionSpec, TransactionState
from kafka.errors import (
    BrokerResponseError,
    InvalidProducerEpochError,
    TransactionalIdNotFoundError,
    TransactionCoordinatorFencedError,
    UnknownTopicOrPartitionError,
)

from odradek.testing import BrokerProcess, start_broker, unique_topic

pytestmark = pytest.mark.integration

#: the producer that dies inside its second transaction (argv: bootstrap, transactional id, topic)
DYING_PRODUCER = """
import os, signal, sys
from confluent_kafka import Producer
bootstrap, tid, topic = sys.argv[1:4]
p = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, "transaction.timeout.ms": 900000})
p.init_transactions(20)
p.begin_transaction()
p.produce(topic, b"committed")
p.commit_transaction(20)
p.begin_transaction()
p.produce(topic, b"hanging-0")
p.produce(topic, b"hanging-1")
assert p.flush(20) == 0
os.kill(os.getpid(), signal.SIGKILL)
"""


#: the broker's id (odradek's default ``broker.id``)
BROKER_ID = 0


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A broker of its own: the hanging transaction stays Ongoing at its coordinator for 15 minutes."""
    with start_broker(Path(tmp_path_factory.mktemp("txn-tooling"))) as b:
        yield b


def _hang(broker: BrokerProcess) -> tuple[str, str]:
    """A topic with a committed record, then a transaction whose producer was killed; then a
    plain record behind it. Returns (topic, transactional id)."""
    topic, tid = unique_topic("hang"), unique_topic("tid")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(TIMEOUT_S)
    dying = subprocess.run(
        [sys.executable, "-c", DYING_PRODUCER, broker.bootstrap, tid, topic], capture_output=True, timeout=60
    )
    assert dying.returncode == -9, dying.stderr.decode()
    plain = Producer({"bootstrap.servers": broker.bootstrap})
    plain.produce(topic, b"after")
    assert plain.flush(TIMEOUT_S) == 0
    return topic, tid


def _stable_end(broker: BrokerProcess, tp: KTP) -> int:
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, isolation_level="read_committed")
    try:
        return int(consumer.end_offsets([tp])[tp])
    finally:
        consumer.close()


def test_find_and_abort_a_hanging_transaction(broker: BrokerProcess) -> None:
    topic, tid = _hang(broker)
    tp = KTP(topic, 0)
    # log: committed 0, COMMIT 1, hanging-0 2, hanging-1 3, after 4
    assert _stable_end(broker, tp) == 2  # the LSO is stuck at the open transaction
    tools = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        listed = tools.list_transactions(state_filters=["Ongoing"])
        (mine,) = [t for txns in listed.values() for t in txns if t.transactional_id == tid]
        assert mine.state is TransactionState.ONGOING
        (node,) = listed  # one broker: every coordinator partition is its
        assert tools.list_transactions(state_filters=["CompleteAbort"]) == {node: []}
        by_pid = tools.list_transactions(producer_id_filters=[mine.producer_id])[node]
        assert [t.transactional_id for t in by_pid] == [tid]
        assert tools.list_transactions(duration_filter_ms=3_600_000) == {node: []}  # v1: none runs for an hour
        # v2 (KIP-1152): a pattern the whole id matches
        by_pattern = tools.list_transactions(transactional_id_pattern=f"{tid[:-1]}.")[node]
        assert [t.transactional_id for t in by_pattern] == [tid]
        assert tools.list_transactions(transactional_id_pattern=tid[1:]) == {node: []}
        # INVALID_REGULAR_EXPRESSION (128), which kafka-python does not name
        with pytest.raises(BrokerResponseError, match="error_code=128"):
            tools.list_transactions(transactional_id_pattern="(unclosed")

        desc = tools.describe_transactions([tid])[tid]
        assert (desc.state, desc.producer_id, desc.transaction_timeout_ms) == (
            TransactionState.ONGOING,
            mine.producer_id,
            900000,
        )
        assert desc.topic_partitions == {tp} and 0 < desc.transaction_start_time_ms <= time.time() * 1000

        (producer,) = tools.describe_producers([tp])[tp].active_producers
        assert (producer.producer_id, producer.producer_epoch) == (desc.producer_id, desc.producer_epoch)
        assert producer.current_transaction_start_offset == 2 and producer.last_sequence == 2
        assert producer.coordinator_epoch >= 0  # from the first transaction's COMMIT marker

        # kafka-python pads the threshold with 5 minutes, as Java's tool does: passing -5 min
        # flags any transaction open longer than 0 ms instead of waiting 20 minutes
        hanging = tools.find_hanging_transactions(max_transaction_timeout_ms=-5 * 60 * 1000)
        (found,) = [h for h in hanging if h["transactional_id"] == tid]
        assert (found["producer_id"], found["state"], found["topic_partitions"]) == (
            desc.producer_id,
            "Ongoing",
            [tp],
        )

        spec = AbortTransactionSpec(tp, producer.producer_id, producer.producer_epoch, producer.coordinator_epoch)
        # a marker older than what the partition has seen is refused, as Kafka's leader refuses it
        with pytest.raises(TransactionCoordinatorFencedError):
            tools.abort_transaction(spec._replace(coordinator_epoch=producer.coordinator_epoch - 1))
        with pytest.raises(InvalidProducerEpochError):
            tools.abort_transaction(spec._replace(producer_epoch=producer.producer_epoch - 1))
        assert _stable_end(broker, tp) == 2  # refused markers wrote nothing

        tools.abort_transaction(spec)
        assert _stable_end(broker, tp) == 6  # ... after 4, ABORT 5: the LSO reached the log end
        (after,) = tools.describe_producers([tp])[tp].active_producers
        assert after.current_transaction_start_offset == -1
    finally:
        tools.close()
    # read_committed consumers get past it and drop the aborted records (the aborted index has them)
    got = consume(broker, topic, 2, **{"isolation.level": "read_committed"})
    assert [m.value() for m in got] == [b"committed", b"after"]
    everything = consume(broker, topic, 4, **{"isolation.level": "read_uncommitted"})
    assert [m.value() for m in everything] == [b"committed", b"hanging-0", b"hanging-1", b"after"]


def test_tooling_errors(broker: BrokerProcess) -> None:
    topic = unique_topic("errs")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(TIMEOUT_S)
    tools = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    node = BROKER_ID
    try:
        with pytest.raises(TransactionalIdNotFoundError):
            tools.describe_transactions([unique_topic("never-used")])
        with pytest.raises(UnknownTopicOrPartitionError):
            tools.describe_producers([KTP(topic, 7)], broker_id=node)
        with pytest.raises(UnknownTopicOrPartitionError):
            tools.describe_producers([KTP(unique_topic("missing"), 0)], broker_id=node)
        assert tools.describe_producers([KTP(topic, 0)])[KTP(topic, 0)].active_producers == []
        # state names Kafka does not know come back in UnknownStateFilters (kafka-python drops
        # the field, so the request goes through its connection manager)
        request = tools._list_transactions_request(state_filters=["Ongoing", "Hanging"])
        response: Any = tools._manager.run(tools._manager.send, request, node)
        assert (response.error_code, list(response.unknown_state_filters)) == (0, ["Hanging"])
    finally:
        tools.close()
