"""Transactions across a three-broker cluster (ZooKeeper), driven by confluent-kafka.

The transaction coordinator (the leader of the transactional id's ``__transaction_state``
partition) delivers COMMIT/ABORT markers to the leaders of the transaction's partitions with
WriteTxnMarkers, the group coordinator of ``send_offsets_to_transaction`` is another broker, and a
coordinator killed while markers are pending is replaced by one that finishes the transaction.
The transactional ids and groups are chosen (by hashing them as the brokers do) so that each
role falls on the broker the scenario needs.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from test_replication_cluster import all_brokers_seen, wait_for

from odradek.broker.group.hashing import partition_for
from odradek.testing.broker import BrokerProcess, start_broker, unique_topic
from odradek.testing.servers import unique_chroot

pytestmark = pytest.mark.integration

INTERNAL_PARTITIONS = 6
TIMEOUT_S = 30.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, zookeeper_server: Any) -> Iterator[dict[int, BrokerProcess]]:
    """Three brokers whose internal topics are small and replicated on all three."""
    settings = _cluster_settings(zookeeper_server, "txn")
    base = tmp_path_factory.mktemp("txn-cluster")
    with contextlib.ExitStack() as stack:
        brokers = {
            i: stack.enter_context(start_broker(Path(base) / f"b{i}", {**settings, "broker.id": i})) for i in (1, 2, 3)
        }
        wait_for("three live brokers", lambda: all_brokers_seen(brokers))
        admin = AdminClient({"bootstrap.servers": _bootstrap(brokers)})
        # the internal topics come with the first coordinator look-ups
        _txn_producer(_bootstrap(brokers), unique_topic("probe")).flush(1)
        with contextlib.suppress(KafkaException):  # NOT_COORDINATOR while the topic is new: created all the same
            admin.describe_consumer_groups(["probe"])["probe"].result(TIMEOUT_S)
        for topic in ("__transaction_state", "__consumer_offsets"):
            wait_for(f"{topic} led everywhere", lambda t=topic: len(_leaders(admin, t)) == INTERNAL_PARTITIONS)
        yield brokers


def _cluster_settings(zookeeper_server: Any, chroot_prefix: str) -> dict[str, Any]:
    """The brokers' settings (without ``broker.id``), in a ZooKeeper chroot of their own."""
    return {
        "metadata": "zookeeper",
        "zookeeper.connect": zookeeper_server.connect_string + unique_chroot(chroot_prefix),
        "zookeeper.session.timeout.ms": 2000,
        "replica.lag.time.max.ms": 3000,
        "replica.fetch.wait.max.ms": 200,
        "group.initial.rebalance.delay.ms": 0,
        "offsets.topic.num.partitions": INTERNAL_PARTITIONS,
        "offsets.topic.replication.factor": 3,
        "transaction.state.log.num.partitions": INTERNAL_PARTITIONS,
        "transaction.state.log.replication.factor": 3,
    }


def _bootstrap(brokers: dict[int, BrokerProcess], *, without: int | None = None) -> str:
    return ",".join(b.bootstrap for i, b in brokers.items() if i != without)


def _leaders(admin: AdminClient, topic: str) -> dict[int, int]:
    """partition -> leader of ``topic`` as the cluster reports it (led partitions only)."""
    try:
        md = admin.list_topics(topic, timeout=2).topics.get(topic)
    except KafkaException:
        return {}
    if md is None or md.error is not None:
        return {}
    return {p: pm.leader for p, pm in md.partitions.items() if pm.error is None and pm.leader >= 0}


def _name_led_by(admin: AdminClient, topic: str, prefix: str, broker: int | None = None, *,
                 not_by: int | None = None) -> tuple[str, int]:  # fmt: skip
    """A fresh transactional id / group name whose ``topic`` partition is led by ``broker``
    (or by anyone but ``not_by``), and that leader."""
    leaders = _leaders(admin, topic)
    for i in range(10_000):
        name = f"{prefix}-{time.monotonic_ns()}-{i}"
        leader = leaders.get(partition_for(name, INTERNAL_PARTITIONS), -1)
        if leader >= 0 and (broker is None or leader == broker) and leader != not_by:
            return name, leader
    raise AssertionError(f"no name led as wanted in {leaders}")


def _data_topic(admin: AdminClient, assignment: list[list[int]]) -> str:
    topic = unique_topic("txn-data")
    admin.create_topics([NewTopic(topic, num_partitions=len(assignment), replica_assignment=assignment)])[topic].result(
        TIMEOUT_S
    )
    wanted = {p: replicas[0] for p, replicas in enumerate(assignment)}
    wait_for("the data topic's preferred leaders", lambda: _leaders(admin, topic) == wanted)
    return topic


def _txn_producer(bootstrap: str, tid: str) -> Producer:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": tid,
            "linger.ms": 5,
            "topic.metadata.refresh.interval.ms": 1000,
        }
    )
    producer.init_transactions(TIMEOUT_S)
    return producer


def _read(bootstrap: str, topic: str, partitions: int, isolation: str, expected: int) -> list[bytes]:
    """Every record of ``topic`` from the start (values), polling until ``expected`` arrived and
    then a little longer, so extra records would be seen too."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique_topic("reader"),
            "isolation.level": isolation,
            "enable.auto.commit": False,
            "topic.metadata.refresh.interval.ms": 1000,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out: list[bytes] = []
    deadline = time.monotonic() + TIMEOUT_S
    settle: float | None = None
    try:
        while time.monotonic() < deadline and (settle is None or time.monotonic() < settle):
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            out.append(msg.value())
            if len(out) >= expected and settle is None:
                settle = time.monotonic() + 1.0
    finally:
        consumer.close()
    return out


def test_commit_and_abort_across_brokers_with_offsets_on_another_coordinator(cluster: dict[int, BrokerProcess]) -> None:
    """Data partitions led by all three brokers, the transaction coordinated by one broker and
    the group by another: the committed transaction's records and offsets become visible, the
    aborted one's never do, and read_uncommitted readers step over the markers."""
    bootstrap = _bootstrap(cluster)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = _data_topic(admin, [[1, 2], [2, 3], [3, 1]])
    tid, txn_coordinator = _name_led_by(admin, "__transaction_state", "tid")
    group, group_coordinator = _name_led_by(admin, "__consumer_offsets", "group", not_by=txn_coordinator)
    assert group_coordinator != txn_coordinator

    source = TopicPartition(topic, 0)
    group_consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    producer = _txn_producer(bootstrap, tid)
    try:
        for outcome, offset in (("committed", 10), ("aborted", 20)):
            producer.begin_transaction()
            for p in range(3):
                for i in range(2):
                    producer.produce(topic, value=f"{outcome}-{p}-{i}".encode(), partition=p)
            producer.send_offsets_to_transaction(
                [TopicPartition(topic, 0, offset)], group_consumer.consumer_group_metadata(), TIMEOUT_S
            )
            if outcome == "committed":
                producer.commit_transaction(TIMEOUT_S)
            else:
                producer.flush(TIMEOUT_S)
                producer.abort_transaction(TIMEOUT_S)
        committed = sorted(f"committed-{p}-{i}".encode() for p in range(3) for i in range(2))
        aborted = sorted(f"aborted-{p}-{i}".encode() for p in range(3) for i in range(2))
        assert sorted(_read(bootstrap, topic, 3, "read_committed", len(committed))) == committed
        assert sorted(_read(bootstrap, topic, 3, "read_uncommitted", 12)) == sorted(committed + aborted)
        (got,) = group_consumer.committed([source], TIMEOUT_S)
        assert got.offset == 10, got
    finally:
        group_consumer.close()
    for b in cluster.values():
        assert not b.log_problems(), b.log_problems()


def test_transaction_tools_ask_every_broker_and_any_replica(cluster: dict[int, BrokerProcess]) -> None:
    """KIP-664 in a cluster: ListTransactions is answered by each broker for the ids it
    coordinates, DescribeTransactions by the id's coordinator, DescribeProducers by every replica
    of a partition (followers from their replicated producer state) and NOT_LEADER_OR_FOLLOWER by
    a broker without one."""
    from kafka import KafkaAdminClient
    from kafka import TopicPartition as KTP
    from kafka.errors import NotLeaderForPartitionError

    bootstrap = _bootstrap(cluster)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    tid, coordinator = _name_led_by(admin, "__transaction_state", "tools")
    topic, elsewhere = _data_topic(admin, [[1, 2, 3]]), _data_topic(admin, [[2]])
    producer = _txn_producer(bootstrap, tid)
    producer.begin_transaction()
    producer.produce(topic, b"open", partition=0)
    assert producer.flush(TIMEOUT_S) == 0
    tools = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        listed = tools.list_transactions(state_filters=["Ongoing"])
        assert sorted(listed) == [1, 2, 3]
        assert {b for b, txns in listed.items() if tid in {t.transactional_id for t in txns}} == {coordinator}
        desc = tools.describe_transactions([tid])[tid]
        assert (desc.coordinator_id, desc.state.value, desc.topic_partitions) == (
            coordinator,
            "Ongoing",
            {KTP(topic, 0)},
        )
        tp = KTP(topic, 0)

        def open_on(broker: int) -> bool:
            producers = tools.describe_producers([tp], broker_id=broker)[tp].active_producers
            return [(p.producer_id, p.current_transaction_start_offset) for p in producers] == [(desc.producer_id, 0)]

        for broker in (1, 2, 3):
            wait_for(f"the open transaction in broker {broker}'s replica", lambda b=broker: open_on(b))
        with pytest.raises(NotLeaderForPartitionError):
            tools.describe_producers([KTP(elsewhere, 0)], broker_id=1)  # only broker 2 has a replica
    finally:
        tools.close()
        producer.abort_transaction(TIMEOUT_S)


def test_a_new_coordinator_completes_a_transaction_whose_coordinator_died(cluster: dict[int, BrokerProcess]) -> None:
    """The coordinator is SIGKILLed after PrepareCommit is durable while a marker cannot be
    delivered (its partition's only replica is paused); the broker that takes over the
    transactional id's __transaction_state partition resumes the markers from the log, and
    read_committed readers see the transaction committed. Runs last: it kills a broker."""
    bootstrap = _bootstrap(cluster)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    tid, x = _name_led_by(admin, "__transaction_state", "fault")
    z, w = (i for i in sorted(cluster) if i != x)
    topic = _data_topic(admin, [[z], [w]])  # nothing on the coordinator; partition 0 only on z
    producer = _txn_producer(bootstrap, tid)
    producer.begin_transaction()
    for p in range(2):
        for i in range(3):
            producer.produce(topic, value=f"v-{p}-{i}".encode(), partition=p)
    producer.flush(TIMEOUT_S)

    paused = cluster[z].process
    assert paused is not None
    outcome: list[Any] = []

    def commit() -> None:
        try:
            producer.commit_transaction(60)
            outcome.append(None)
        except KafkaException as exc:
            outcome.append(exc)

    paused.send_signal(signal.SIGSTOP)
    committer = threading.Thread(target=commit, daemon=True)
    try:
        committer.start()
        seen = len(cluster[x].log_path.read_text().splitlines())
        wait_for(
            "PrepareCommit written and a marker pending on the coordinator",
            lambda: any(
                f"COMMIT markers of '{tid}' not written yet" in line
                for line in cluster[x].log_path.read_text().splitlines()[seen:]
            ),
            timeout_s=TIMEOUT_S,
        )
        cluster[x].kill()
    finally:
        paused.send_signal(signal.SIGCONT)
    survivors = _bootstrap(cluster, without=x)
    expected = sorted(f"v-{p}-{i}".encode() for p in range(2) for i in range(3))
    assert sorted(_read(survivors, topic, 2, "read_committed", len(expected))) == expected
    committer.join(TIMEOUT_S)
    assert not committer.is_alive()
    # nothing left hanging: the id can be re-initialised (InitProducerId would answer
    # CONCURRENT_TRANSACTIONS while the old transaction is still being completed) and used again
    again = _txn_producer(survivors, tid)
    again.begin_transaction()
    again.produce(topic, value=b"after", partition=1)
    again.commit_transaction(TIMEOUT_S)
    assert b"after" in _read(survivors, topic, 2, "read_committed", len(expected) + 1)
    for i in (z, w):
        assert not cluster[i].log_problems(), cluster[i].log_problems()


def test_the_first_transaction_of_a_fresh_cluster_commits(tmp_path: Path, zookeeper_server: Any) -> None:
    """The first transaction right after ``init_transactions`` on a cluster whose
    ``__transaction_state`` that InitProducerId has just created: the leaders of the data
    partitions may not have looked at the new topic yet when the first batches arrive, and must
    then answer a retriable error, not INVALID_TXN_STATE (which made librdkafka fail the
    delivery and the transaction abort: 3 of 8 runs of this test failed so)."""
    settings = _cluster_settings(zookeeper_server, "txn-fresh")
    brokers = {i: BrokerProcess(tmp_path / f"b{i}", {k: str(v) for k, v in {**settings, "broker.id": i}.items()})
               for i in (1, 2, 3)}  # fmt: skip
    try:
        starters = [threading.Thread(target=b.start) for b in brokers.values()]
        for t in starters:
            t.start()
        for t in starters:
            t.join()
        for b in brokers.values():
            b.check_alive()
        wait_for("three live brokers", lambda: all_brokers_seen(brokers))
        bootstrap = _bootstrap(brokers)
        topic = _data_topic(AdminClient({"bootstrap.servers": bootstrap}), [[1, 2, 3], [2, 3, 1], [3, 1, 2]])
        producer = _txn_producer(bootstrap, unique_topic("fresh-tid"))
        producer.begin_transaction()
        reports: list[Any] = []
        for p in range(3):
            producer.produce(
                topic, value=f"first-{p}".encode(), partition=p, on_delivery=lambda e, _m: reports.append(e)
            )
        assert producer.flush(TIMEOUT_S) == 0
        assert reports == [None, None, None]
        producer.commit_transaction(TIMEOUT_S)
        assert sorted(_read(bootstrap, topic, 3, "read_committed", 3)) == [f"first-{p}".encode() for p in range(3)]
    finally:
        for b in brokers.values():
            b.kill()  # a throwaway cluster: no controlled shutdown to wait for
