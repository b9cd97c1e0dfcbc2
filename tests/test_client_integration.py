"""odradek's own client against an ``odradek serve`` subprocess, and against librdkafka.

Interop both ways for every compression, partitioner parity with librdkafka's murmur2_random,
exactly-once in-order delivery while connections are cut mid-stream, the sync facade from several
threads, consumer positioning and commits, admin calls, and mixed odradek/librdkafka groups.
"""

from __future__ import annotations

import concurrent.futures
import random
import threading
import time
from typing import Any

import confluent_kafka
import pytest
import trio

from odradek.client import Admin, Consumer, NewTopic, OffsetAndMetadata, Producer, TopicPartition
from odradek.client.aio import AsyncConsumer, AsyncProducer, ConfigResourceType
from odradek.default_partitioners import murmur2_partition
from odradek.errors import ErrorCode, KafkaError
from odradek.plugins.transport_tcp.client import TcpConnector
from odradek.testing import BrokerProcess, unique_topic

pytestmark = pytest.mark.integration
TIMEOUT_S = 30.0
COMPRESSIONS = ["none", "gzip", "snappy", "lz4", "zstd"]


def _create(broker: BrokerProcess, topic: str, partitions: int = 1) -> None:
    with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
        assert admin.create_topics([NewTopic(topic, partitions, 1)])[topic] is None


def _consume_all(broker: BrokerProcess, topic: str, count: int, **conf: Any) -> list[Any]:
    """Assign every partition from the beginning and poll ``count`` records with odradek."""
    out: list[Any] = []
    with Consumer({"bootstrap.servers": broker.bootstrap, "auto.offset.reset": "earliest", **conf}) as consumer:
        consumer.assign([TopicPartition(topic, p) for p in consumer.partitions_for(topic)])
        deadline = time.monotonic() + TIMEOUT_S
        while len(out) < count and time.monotonic() < deadline:
            for records in consumer.poll(0.5).values():
                out.extend(records)
    assert len(out) == count, f"consumed {len(out)} of {count} records"
    return out


def _records(n: int) -> list[tuple[bytes, bytes, list[tuple[str, bytes]]]]:
    return [(b"key-%d" % i, b"value-%d-" % i * (i % 5 + 1), [("i", str(i).encode())]) for i in range(n)]


# -- interop ------------------------------------------------------------------------------------


@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_odradek_producer_to_librdkafka_consumer(odradek_broker: BrokerProcess, compression: str) -> None:
    topic = unique_topic(f"o2c-{compression}")
    records = _records(300)
    with Producer({"bootstrap.servers": odradek_broker.bootstrap, "compression.type": compression}) as producer:
        futures = [producer.send(topic, v, key=k, headers=h, partition=0) for k, v, h in records]
        producer.flush()
        assert [f.result().offset for f in futures] == list(range(300))
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": odradek_broker.bootstrap, "group.id": unique_topic("g"), "enable.auto.commit": False}
    )
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
        got: list[Any] = []
        deadline = time.monotonic() + TIMEOUT_S
        while len(got) < 300 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(msg)
    finally:
        consumer.close()
    assert [(m.key(), m.value(), m.headers(), m.offset()) for m in got] == [
        (k, v, h, i) for i, (k, v, h) in enumerate(records)
    ]


@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_librdkafka_producer_to_odradek_consumer(odradek_broker: BrokerProcess, compression: str) -> None:
    topic = unique_topic(f"c2o-{compression}")
    records = _records(300)
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": odradek_broker.bootstrap, "compression.type": compression, "linger.ms": 5}
    )
    for k, v, h in records:
        producer.produce(topic, v, key=k, headers=h, partition=0)
    assert producer.flush(TIMEOUT_S) == 0
    got = _consume_all(odradek_broker, topic, 300)
    assert [(r.key, r.value, list(r.headers), r.offset) for r in got] == [
        (k, v, h, i) for i, (k, v, h) in enumerate(records)
    ]
    assert all(r.timestamp > 1_600_000_000_000 and r.timestamp_type == 0 for r in got)


# -- partitioner parity -------------------------------------------------------------------------


def test_murmur2_partition_parity_with_librdkafka(odradek_broker: BrokerProcess) -> None:
    """librdkafka's murmur2_random is the oracle: where its delivery reports put 10,000 random
    keys is where odradek's partitioner and producer put them."""
    partitions = 7
    topic = unique_topic("parity")
    _create(odradek_broker, topic, partitions)
    rng = random.Random(480)
    keys = list({rng.randbytes(rng.randint(1, 40)) for _ in range(10_000)})
    oracle: dict[bytes, int] = {}

    def report(err: Any, msg: Any) -> None:
        assert err is None, err
        oracle[msg.key()] = msg.partition()

    rdk = confluent_kafka.Producer(
        {"bootstrap.servers": odradek_broker.bootstrap, "partitioner": "murmur2_random", "linger.ms": 20}
    )
    for key in keys:
        rdk.produce(topic, b"", key=key, on_delivery=report)
        rdk.poll(0)
    assert rdk.flush(TIMEOUT_S) == 0
    assert len(oracle) == len(keys)
    assert all(murmur2_partition(key, partitions) == oracle[key] for key in keys)
    with Producer({"bootstrap.servers": odradek_broker.bootstrap, "linger.ms": 20}) as producer:
        futures = {key: producer.send(topic, b"", key=key) for key in keys}
        producer.flush()
    assert all(f.result().partition == oracle[key] for key, f in futures.items())


# -- ordering and no duplicates under connection drops -------------------------------------------


class ChaosConnector:
    """The TCP transport's connector whose connections die after a random number of frames sent,
    right after sending (the broker got the request, the client never sees the answer) or
    before (the broker never got it) -- a connection cut mid-stream."""

    def __init__(self, seed: int) -> None:
        self.inner = TcpConnector({})
        self.rng = random.Random(seed)
        self.cuts = 0

    async def connect(self, host: str, port: int, *, timeout_s: float) -> Any:
        conn = await self.inner.connect(host, port, timeout_s=timeout_s)
        return _ChaosConnection(self, conn, budget=self.rng.randint(3, 12))


class _ChaosConnection:
    def __init__(self, chaos: ChaosConnector, conn: Any, budget: int) -> None:
        self.chaos = chaos
        self.conn = conn
        self.budget = budget

    async def send_frame(self, frame: bytes) -> None:
        self.budget -= 1
        if self.budget < 0:
            after = self.chaos.rng.random() < 0.5
            if after:
                await self.conn.send_frame(frame)
            self.chaos.cuts += 1
            await self.conn.aclose()
            raise ConnectionResetError("chaos: connection cut " + ("after" if after else "before") + " the send")
        await self.conn.send_frame(frame)

    async def receive_frame(self) -> bytes:
        result: bytes = await self.conn.receive_frame()
        return result

    async def aclose(self) -> None:
        await self.conn.aclose()


def test_exactly_once_in_order_while_connections_are_cut(odradek_broker: BrokerProcess) -> None:
    topic = unique_topic("chaos")
    _create(odradek_broker, topic, 3)
    chaos = ChaosConnector(seed=45)
    total = 6000

    async def produce() -> None:
        conf = {"bootstrap.servers": odradek_broker.bootstrap, "linger.ms": 2, "batch.size": 1000,
                "retry.backoff.ms": 5, "reconnect.backoff.ms": 5}  # fmt: skip
        async with AsyncProducer(conf, connector=chaos) as producer:
            futures = []
            for i in range(total):
                futures.append(await producer.send(topic, b"%06d" % i, partition=i % 3))
                if i % 200 == 0:
                    await trio.sleep(0.001)
            for f in futures:
                await f

    trio.run(produce)
    assert chaos.cuts >= 5, "the chaos connector did not cut enough connections to mean anything"
    got = _consume_all(odradek_broker, topic, total)
    for p in range(3):
        values = [r.value for r in got if r.partition == p]
        assert values == [b"%06d" % i for i in range(p, total, 3)]  # every record once, in order


# -- sync facade ----------------------------------------------------------------------------------


def test_sync_facade_from_several_threads(odradek_broker: BrokerProcess) -> None:
    topic = unique_topic("threads")
    _create(odradek_broker, topic, 4)
    producer = Producer({"bootstrap.servers": odradek_broker.bootstrap})
    per_thread = 2000
    results: dict[int, list[concurrent.futures.Future[Any]]] = {}

    def work(n: int) -> None:
        results[n] = [producer.send(topic, b"%d-%d" % (n, i), key=b"thread-%d" % n) for i in range(per_thread)]

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    producer.flush()
    done, _ = concurrent.futures.wait([f for fs in results.values() for f in fs], timeout=TIMEOUT_S)
    assert len(done) == 4 * per_thread
    for _n, futures in results.items():
        metadata = [f.result() for f in futures]
        assert len({m.partition for m in metadata}) == 1  # one key, one partition
        offsets = [m.offset for m in metadata]
        assert offsets == sorted(offsets)  # a thread's records keep their order
    producer.close()
    got = _consume_all(odradek_broker, topic, 4 * per_thread)
    assert {r.value for r in got} == {b"%d-%d" % (n, i) for n in range(4) for i in range(per_thread)}

    # consumers, too, may be used from several threads: poll in one, commit and seek in others
    consumer = Consumer({"bootstrap.servers": odradek_broker.bootstrap, "group.id": unique_topic("g"),
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})  # fmt: skip
    parts = [TopicPartition(topic, p) for p in range(4)]
    consumer.assign(parts)
    seen = 0
    while seen < 4 * per_thread:
        seen += sum(len(rs) for rs in consumer.poll(1.0).values())
    worker = threading.Thread(target=consumer.commit)
    worker.start()
    worker.join()
    committed = consumer.committed(parts)
    assert sum(c.offset for c in committed.values() if c is not None) == 4 * per_thread
    consumer.close()


# -- consumer positioning -------------------------------------------------------------------------


def test_consumer_seek_pause_offsets_for_times_and_commits(odradek_broker: BrokerProcess) -> None:
    topic = unique_topic("positions")
    tp = TopicPartition(topic, 0)
    base = 1_700_000_000_000
    with Producer({"bootstrap.servers": odradek_broker.bootstrap}) as producer:
        for i in range(100):
            producer.send(topic, b"%d" % i, timestamp=base + i * 1000, partition=0)
    group = unique_topic("g")
    conf = {"bootstrap.servers": odradek_broker.bootstrap, "group.id": group, "enable.auto.commit": False,
            "auto.offset.reset": "earliest", "max.poll.records": 30}  # fmt: skip
    with Consumer(conf) as consumer:
        consumer.assign([tp])
        assert consumer.position(tp) == 0
        batch = consumer.poll(5.0)[tp]
        assert [r.offset for r in batch] == list(range(30))  # max.poll.records
        consumer.seek(tp, 90)
        assert [r.offset for r in consumer.poll(5.0)[tp]] == list(range(90, 100))
        found = consumer.offsets_for_times({tp: base + 41_500})
        assert found[tp] is not None and (found[tp].offset, found[tp].timestamp) == (42, base + 42_000)
        assert consumer.offsets_for_times({tp: base + 10**9})[tp] is None
        assert consumer.beginning_offsets([tp]) == {tp: 0} and consumer.end_offsets([tp]) == {tp: 100}
        consumer.seek_to_beginning([tp])
        assert consumer.position(tp) == 0
        consumer.pause([tp])
        assert consumer.poll(0.5) == {} and consumer.paused() == {tp}
        consumer.resume([tp])
        assert consumer.poll(5.0)[tp][0].offset == 0
        consumer.commit({tp: OffsetAndMetadata(57, "half")})
        assert consumer.committed([tp])[tp] == OffsetAndMetadata(57, "half", -1)
    # a new consumer of the group resumes from the committed offset
    with Consumer(conf) as consumer:
        consumer.assign([tp])
        assert consumer.poll(5.0)[tp][0].offset == 57
        consumer.seek_to_end([tp])
        assert consumer.position(tp) == 100


# -- admin ------------------------------------------------------------------------------------------


def test_admin_topics_configs_records_and_offsets(odradek_broker: BrokerProcess) -> None:
    topic = unique_topic("admin")
    bootstrap = odradek_broker.bootstrap
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        cluster = admin.describe_cluster()
        assert [b.node_id for b in cluster.brokers] == [cluster.controller_id]
        created = admin.create_topics([NewTopic(topic, 2, 1, {"retention.ms": "3600000"})])
        assert created == {topic: None}
        again = admin.create_topics([NewTopic(topic, 2, 1)])[topic]
        assert isinstance(again, KafkaError) and again.code is ErrorCode.TOPIC_ALREADY_EXISTS
        assert admin.list_topics()[topic] == 2
        desc = admin.describe_topics([topic])[topic]
        assert not isinstance(desc, KafkaError) and [p.partition for p in desc.partitions] == [0, 1]
        configs = admin.describe_configs([(ConfigResourceType.TOPIC, topic)])[(ConfigResourceType.TOPIC, topic)]
        assert not isinstance(configs, KafkaError) and configs["retention.ms"].value == "3600000"
        changed = admin.incremental_alter_configs({(ConfigResourceType.TOPIC, topic): [("retention.ms", 0, "7200000")]})
        assert list(changed.values()) == [None]
        configs = admin.describe_configs([(ConfigResourceType.TOPIC, topic)])[(ConfigResourceType.TOPIC, topic)]
        assert configs["retention.ms"].value == "7200000"  # type: ignore[index]
        assert admin.create_partitions({topic: 3}) == {topic: None}
        assert admin.list_topics()[topic] == 3
        with Producer({"bootstrap.servers": bootstrap}) as producer:
            for i in range(50):
                producer.send(topic, b"%d" % i, partition=1)
        tp = TopicPartition(topic, 1)
        offsets = admin.list_offsets({tp: "earliest"})
        assert offsets[tp].offset == 0 and admin.list_offsets({tp: "latest"})[tp].offset == 50
        assert admin.delete_records({tp: 20}) == {tp: 20}
        assert admin.list_offsets({tp: "earliest"})[tp].offset == 20
        group = unique_topic("g")
        admin.alter_consumer_group_offsets(group, {tp: 33})
        assert admin.list_consumer_group_offsets(group)[tp].offset == 33
        assert admin.delete_topics([topic]) == {topic: None}
        missing = admin.delete_topics([topic])[topic]
        assert isinstance(missing, KafkaError) and missing.code is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


# -- groups -------------------------------------------------------------------------------------------


class Listener:
    def __init__(self) -> None:
        self.events: list[tuple[str, list[TopicPartition]]] = []

    def on_partitions_assigned(self, parts: list[TopicPartition]) -> None:
        self.events.append(("assigned", sorted(parts)))

    def on_partitions_revoked(self, parts: list[TopicPartition]) -> None:
        self.events.append(("revoked", sorted(parts)))


def test_group_of_odradek_and_librdkafka_consumers(odradek_broker: BrokerProcess) -> None:
    """One odradek and one librdkafka consumer share a group (range): together they read every
    record exactly once; the odradek member's listener sees its assignment; when it leaves, the
    librdkafka member takes over its partitions and resumes from the committed offsets."""
    topic = unique_topic("mixed")
    _create(odradek_broker, topic, 4)
    group = unique_topic("g")
    with Producer({"bootstrap.servers": odradek_broker.bootstrap}) as producer:
        for i in range(400):
            producer.send(topic, b"%d" % i, partition=i % 4)
    rdk = confluent_kafka.Consumer({"bootstrap.servers": odradek_broker.bootstrap, "group.id": group,
                                    "auto.offset.reset": "earliest", "enable.auto.commit": False,
                                    "partition.assignment.strategy": "range"})  # fmt: skip
    listener = Listener()
    ours = Consumer({"bootstrap.servers": odradek_broker.bootstrap, "group.id": group,
                     "auto.offset.reset": "earliest", "enable.auto.commit": False,
                     "partition.assignment.strategy": "range", "heartbeat.interval.ms": 500})  # fmt: skip
    ours.subscribe([topic], listener)
    rdk.subscribe([topic])
    values: dict[str, list[bytes]] = {"ours": [], "rdk": []}
    deadline = time.monotonic() + 60
    try:
        while len(values["ours"]) + len(values["rdk"]) < 400 and time.monotonic() < deadline:
            for records in ours.poll(0.1).values():
                values["ours"].extend(r.value for r in records)
            for msg in rdk.consume(500, 0.1):
                if msg.error() is None:
                    values["rdk"].append(msg.value())
        assert sorted(values["ours"] + values["rdk"], key=int) == [b"%d" % i for i in range(400)]
        assert values["ours"] and values["rdk"], "both members must have had partitions"
        mine = ours.assignment()
        assert len(mine) == 2 and ("assigned", sorted(mine)) in listener.events
        ours.commit()
        rdk.commit(asynchronous=False)
    finally:
        ours.close()
    assert listener.events[-1] == ("revoked", sorted(mine))
    with Producer({"bootstrap.servers": odradek_broker.bootstrap}) as producer:
        for i in range(400, 440):
            producer.send(topic, b"%d" % i, partition=i % 4)
    late: set[tuple[int, bytes]] = set()
    deadline = time.monotonic() + 60
    try:
        # at-least-once: the librdkafka member may re-read its own uncommitted records after the
        # rebalance, but it must start the odradek member's partitions at the committed offsets
        while len({v for _, v in late}) < 40 and time.monotonic() < deadline:
            for msg in rdk.consume(500, 0.5):
                if msg.error() is None:
                    late.add((msg.partition(), msg.value()))
    finally:
        rdk.close()
    assert sorted({v for _, v in late}, key=int) == [b"%d" % i for i in range(400, 440)]
    assert all(int(v) >= 400 for p, v in late if TopicPartition(topic, p) in mine)


def test_two_odradek_consumers_split_and_rebalance_cooperatively(odradek_broker: BrokerProcess) -> None:
    topic = unique_topic("coop")
    _create(odradek_broker, topic, 6)
    group = unique_topic("g")

    async def run() -> None:
        conf = {"bootstrap.servers": odradek_broker.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                "partition.assignment.strategy": "cooperative-sticky", "heartbeat.interval.ms": 300}  # fmt: skip
        first_listener, second_listener = Listener(), Listener()
        async with AsyncConsumer(conf) as first:
            first.subscribe([topic], first_listener)
            with trio.fail_after(30):
                while len(first.assignment()) < 6:
                    await first.poll(0.2)
            async with AsyncConsumer(conf) as second:
                second.subscribe([topic], second_listener)
                with trio.fail_after(30):
                    while len(first.assignment()) != 3 or len(second.assignment()) != 3:
                        await first.poll(0.1)
                        await second.poll(0.1)
                assert first.assignment().isdisjoint(second.assignment())
                # cooperative: the first member only gave up what moved, it never revoked everything
                revoked = [parts for kind, parts in first_listener.events if kind == "revoked"]
                assert revoked and all(len(parts) == 3 for parts in revoked)

    trio.run(run)


def test_cooperative_consumers_polled_from_concurrent_tasks_rebalance(odradek_broker: BrokerProcess) -> None:
    """Two cooperative consumers in one trio run, each polled by its own task that does not
    yield between polls (await poll() in a bare loop). A member that owns partitions keeps
    fetching while its rejoin runs; its poll() used to spin without a checkpoint until its
    timeout, so the rejoin task never ran and the group never finished rebalancing."""
    topic = unique_topic("coop-tasks")
    _create(odradek_broker, topic, 2)
    conf = {"bootstrap.servers": odradek_broker.bootstrap, "group.id": unique_topic("g"),
            "partition.assignment.strategy": "cooperative-sticky"}  # fmt: skip

    async def run() -> None:
        async with AsyncConsumer(conf) as first, AsyncConsumer(conf) as second:
            first.subscribe([topic])
            with trio.fail_after(30):
                while len(first.assignment()) < 2:
                    await first.poll(0.5)
            second.subscribe([topic])

            async def poll_forever(consumer: AsyncConsumer) -> None:
                while True:
                    await consumer.poll(0.5)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(poll_forever, first)
                nursery.start_soon(poll_forever, second)
                with trio.fail_after(30):
                    while len(first.assignment()) != 1 or len(second.assignment()) != 1:
                        await trio.sleep(0.1)
                nursery.cancel_scope.cancel()

    trio.run(run)


def test_pattern_subscription_follows_new_topics(odradek_broker: BrokerProcess) -> None:
    prefix = unique_topic("pat")
    _create(odradek_broker, f"{prefix}-a", 1)
    conf = {"bootstrap.servers": odradek_broker.bootstrap, "group.id": unique_topic("g"),
            "auto.offset.reset": "earliest", "metadata.max.age.ms": 300}  # fmt: skip
    with Consumer(conf) as consumer:
        consumer.subscribe(f"^{prefix}-.*")
        deadline = time.monotonic() + TIMEOUT_S
        while {tp.topic for tp in consumer.assignment()} != {f"{prefix}-a"} and time.monotonic() < deadline:
            consumer.poll(0.2)
        _create(odradek_broker, f"{prefix}-b", 2)
        _create(odradek_broker, unique_topic("other"), 1)
        with Producer({"bootstrap.servers": odradek_broker.bootstrap}) as producer:
            producer.send(f"{prefix}-b", b"found", partition=1)
        got: list[Any] = []
        while not got and time.monotonic() < deadline:
            for records in consumer.poll(0.2).values():
                got.extend(records)
        assert [(r.topic, r.partition, r.value) for r in got] == [(f"{prefix}-b", 1, b"found")]
        assert {tp.topic for tp in consumer.assignment()} == {f"{prefix}-a", f"{prefix}-b"}


def test_static_member_keeps_its_partitions_across_a_restart(odradek_broker: BrokerProcess) -> None:
    topic = unique_topic("static")
    _create(odradek_broker, topic, 2)
    group = unique_topic("g")
    conf = {"bootstrap.servers": odradek_broker.bootstrap, "group.id": group, "group.instance.id": "worker-1",
            "session.timeout.ms": 30000, "heartbeat.interval.ms": 500}  # fmt: skip

    def join() -> tuple[set[TopicPartition], list[Any], int]:
        with Consumer(conf) as consumer:
            consumer.subscribe([topic])
            deadline = time.monotonic() + TIMEOUT_S
            while not consumer.assignment() and time.monotonic() < deadline:
                consumer.poll(0.2)
            assignment = consumer.assignment()
            generation = consumer._async.coordinator.generation
            with Admin({"bootstrap.servers": odradek_broker.bootstrap}) as admin:
                desc = admin.describe_groups([group])[group]
        assert not isinstance(desc, KafkaError)
        return assignment, list(desc.members), generation

    first, members, generation = join()
    assert first == {TopicPartition(topic, 0), TopicPartition(topic, 1)}
    assert [m.group_instance_id for m in members] == ["worker-1"]
    # closing sent no LeaveGroup: the static member comes back into the same generation, no rebalance
    second, members, again = join()
    assert second == first and [m.group_instance_id for m in members] == ["worker-1"]
    assert again == generation


def test_restarted_static_leader_skips_the_assignment(
    odradek_broker: BrokerProcess, caplog: pytest.LogCaptureFixture
) -> None:
    """KIP-814 with a client that speaks JoinGroup v9: odradek's static leader restarts into a
    Stable group of two (the follower a librdkafka consumer), is told it leads and to skip the
    assignment, and both members keep their partitions in the same generation: the follower
    sees no revocation."""
    topic = unique_topic("skip")
    _create(odradek_broker, topic, 2)
    group = unique_topic("g")
    conf = {"bootstrap.servers": odradek_broker.bootstrap, "group.id": group, "group.instance.id": "leader",
            "session.timeout.ms": 30000, "heartbeat.interval.ms": 500,
            "partition.assignment.strategy": "range"}  # fmt: skip
    revoked: list[Any] = []
    follower = confluent_kafka.Consumer({"bootstrap.servers": odradek_broker.bootstrap, "group.id": group,
                                         "group.instance.id": "follower", "session.timeout.ms": 30000,
                                         "partition.assignment.strategy": "range"})  # fmt: skip

    def settled(consumer: Consumer) -> tuple[set[TopicPartition], int]:
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline:
            consumer.poll(0.1)
            follower.poll(0.1)
            if len(consumer.assignment()) == 1 and len(follower.assignment()) == 1:
                return consumer.assignment(), consumer._async.coordinator.generation
        raise AssertionError("the two members did not settle on a partition each")

    try:
        with Consumer(conf) as first:
            first.subscribe([topic])
            deadline = time.monotonic() + TIMEOUT_S
            while not first.assignment() and time.monotonic() < deadline:
                first.poll(0.1)
            follower.subscribe([topic], on_revoke=lambda _, parts: revoked.extend(parts))
            before, generation = settled(first)
        revoked.clear()  # the follower's join rebalanced (an eager revoke); the restart must not
        caplog.set_level("INFO", logger="odradek.client.consumer")
        with Consumer(conf) as second:
            second.subscribe([topic])
            after, again = settled(second)
        assert (after, again) == (before, generation)
        assert "assignment skipped" in caplog.text
        assert revoked == []
    finally:
        follower.close()


@pytest.mark.parametrize("isolation", ["read_committed", "read_uncommitted"])
def test_isolation_levels_over_librdkafka_transactions(odradek_broker: BrokerProcess, isolation: str) -> None:
    topic = unique_topic("txn")
    _create(odradek_broker, topic, 1)
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": odradek_broker.bootstrap, "transactional.id": unique_topic("tx")}
    )
    producer.init_transactions(TIMEOUT_S)
    for outcome in ("commit", "abort", "commit"):
        producer.begin_transaction()
        for i in range(3):
            producer.produce(topic, f"{outcome}-{i}".encode(), partition=0)
        producer.flush(TIMEOUT_S)  # written to the log before the outcome (abort would purge unsent ones)
        if outcome == "commit":
            producer.commit_transaction(TIMEOUT_S)
        else:
            producer.abort_transaction(TIMEOUT_S)
    producer.flush(TIMEOUT_S)
    expected = [b"commit-0", b"commit-1", b"commit-2"] * 2
    if isolation == "read_uncommitted":
        expected = [b"commit-0", b"commit-1", b"commit-2", b"abort-0", b"abort-1", b"abort-2",
                    b"commit-0", b"commit-1", b"commit-2"]  # fmt: skip
    got = _consume_all(odradek_broker, topic, len(expected), **{"isolation.level": isolation})
    assert [r.value for r in got] == expected
