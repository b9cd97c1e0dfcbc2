"""Three odradek brokers replicating one topic, driven by confluent-kafka (librdkafka).

Each test starts three ``odradek serve`` subprocesses (distinct broker ids and data dirs) on a
shared metadata server with a chroot / namespace of its own, creates a topic with replication
factor 3 and min.insync.replicas 2, produces with acks=all, kills the leader with SIGKILL, and
checks that a new leader comes from the ISR, that every acknowledged record is readable from it,
and that the restarted broker catches up and rejoins the ISR.
"""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, ElectionType, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.testing.broker import BrokerProcess, sample, start_broker, unique_topic
from odradek.testing.servers import unique_chroot

SESSION_MS = 2000
LAG_MS = 3000


@contextlib.contextmanager
def three_brokers(tmp_path: Path, metadata: dict[str, str]) -> Iterator[dict[int, BrokerProcess]]:
    settings = {
        "zookeeper.session.timeout.ms": SESSION_MS,
        "etcd.lease.ttl.ms": SESSION_MS,
        "replica.lag.time.max.ms": LAG_MS,
        "replica.fetch.wait.max.ms": 200,
        "group.initial.rebalance.delay.ms": 0,
        "metrics.prometheus.listener": "127.0.0.1:0",
        **metadata,
    }
    with contextlib.ExitStack() as stack:
        brokers = {
            i: stack.enter_context(start_broker(tmp_path / f"b{i}", {**settings, "broker.id": i})) for i in (1, 2, 3)
        }
        yield brokers


def metadata_settings(kind: str, request: pytest.FixtureRequest, prefix: str) -> dict[str, str]:
    """Broker settings for the session ZooKeeper or etcd (``kind``), under a chroot / namespace
    of this test's own."""
    if kind == "zookeeper":
        zk = request.getfixturevalue("zookeeper_server")
        return {"metadata": "zookeeper", "zookeeper.connect": zk.connect_string + unique_chroot(prefix)}
    etcd = request.getfixturevalue("etcd_server")
    return {"metadata": "etcd", "etcd.endpoints": etcd.endpoint, "etcd.namespace": unique_chroot(prefix)}


def exited_for_its_log_dir(broker: BrokerProcess) -> None:
    """Wait for ``broker``, left without a log dir, to exit 1 with one line saying so."""
    process = broker.process
    assert process is not None
    wait_for("the broker without a log dir to exit", lambda: process.poll() is not None)
    assert process.returncode == 1
    (line,) = broker.log_problems()
    assert "every log dir is offline" in line, line


def wait_for(what: str, check: Callable[[], Any], timeout_s: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.1)


def all_brokers_seen(brokers: dict[int, BrokerProcess]) -> bool:
    """Every broker lists all three in its Metadata (so CreateTopics sees them)."""
    for b in brokers.values():
        try:
            md = AdminClient({"bootstrap.servers": b.bootstrap}).list_topics(timeout=2)
        except Exception:
            return False
        if len(md.brokers) < 3:
            return False
    return True


def replicated_topic(brokers: dict[int, BrokerProcess], prefix: str) -> tuple[str, AdminClient, str, int]:
    """Once all three brokers are seen: a new topic with replication factor 3 and
    min.insync.replicas 2, its ISR full; returns (bootstrap, admin, topic, leader)."""
    bootstrap = ",".join(b.bootstrap for b in brokers.values())
    admin = AdminClient({"bootstrap.servers": bootstrap})
    wait_for("three live brokers", lambda: all_brokers_seen(brokers))
    topic = unique_topic(prefix)
    admin.create_topics([NewTopic(topic, 1, 3, config={"min.insync.replicas": "2"})])[topic].result(15)
    leader, _ = wait_for("a full ISR", lambda: (s := partition_state(admin, topic)) and len(s[1]) == 3 and s)
    return bootstrap, admin, topic, leader


def partition_state(admin: AdminClient, topic: str) -> tuple[int, list[int]] | None:
    """(leader, isr) of partition 0 as the cluster reports it, or None."""
    try:
        md = admin.list_topics(topic, timeout=2)
    except Exception:
        return None
    t = md.topics.get(topic)
    if t is None or t.error is not None or 0 not in t.partitions:
        return None
    p = t.partitions[0]
    if p.error is not None or p.leader < 0:
        return None
    return p.leader, sorted(p.isrs)


def produce(bootstrap: str, topic: str, values: list[bytes]) -> set[bytes]:
    """Produce with acks=all; returns the values the cluster acknowledged."""
    acked: set[bytes] = set()

    def on_delivery(err: Any, msg: Any) -> None:
        if err is None:
            acked.add(msg.value())

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "message.timeout.ms": 20000,
            "linger.ms": 5,
            "topic.metadata.refresh.interval.ms": 1000,
        }
    )
    for v in values:
        producer.produce(topic, v, on_delivery=on_delivery)
        producer.poll(0)
    assert producer.flush(30) == 0
    return acked


def consume_all(bootstrap: str, topic: str, expected: int) -> list[bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "replication-test",
            "enable.auto.commit": False,
            "topic.metadata.refresh.interval.ms": 1000,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    out: list[bytes] = []
    deadline = time.monotonic() + 20
    try:
        while len(out) < expected and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                out.append(msg.value())
    finally:
        consumer.close()
    return out


def leader_alone_then_gone(
    brokers: dict[int, BrokerProcess], prefix: str, before_leader_stops: Callable[[str], None] | None = None
) -> tuple[str, int, int, int, set[bytes], AdminClient]:
    """An RF=2 topic on the two brokers that are not the controller: records on both, then the
    follower stops (out of the ISR), ``lost*`` records go to the leader alone, and the leader
    stops too (no leader). ``before_leader_stops(topic)`` runs before that last step (read
    the lost records while they are there). Returns (topic, controller, former leader, stopped
    follower, the records both had, an admin client on the controller)."""
    bootstrap = ",".join(b.bootstrap for b in brokers.values())
    admin = AdminClient({"bootstrap.servers": bootstrap})
    controller = admin.list_topics(timeout=5).controller_id
    first, behind = (i for i in brokers if i != controller)  # the controller stays up throughout
    topic = unique_topic(prefix)
    admin.create_topics([NewTopic(topic, num_partitions=1, replica_assignment=[[first, behind]])])[topic].result(15)
    wait_for("a full ISR", lambda: partition_state(admin, topic) == (first, sorted([first, behind])))
    kept = produce(bootstrap, topic, [b"k%d" % i for i in range(50)])
    assert len(kept) == 50
    brokers[behind].stop()
    wait_for("the follower out of the ISR", lambda: partition_state(admin, topic) == (first, [first]))
    assert len(produce(bootstrap, topic, [b"lost%d" % i for i in range(20)])) == 20  # on the leader alone
    if before_leader_stops is not None:
        before_leader_stops(topic)
    brokers[first].stop()
    live = AdminClient({"bootstrap.servers": brokers[controller].bootstrap})
    wait_for("no leader", lambda: partition_state(live, topic) is None)
    return topic, controller, first, behind, kept, live


def elect_the_follower_uncleanly(brokers: dict[int, BrokerProcess], topic: str, behind: int, live: AdminClient) -> None:
    """After :func:`leader_alone_then_gone`: the stopped follower restarts and is elected
    leader uncleanly (a new leader epoch, without the former leader's ``lost*`` records)."""
    brokers[behind].start()
    wait_for("the follower registered", lambda: len(live.list_topics(timeout=5).brokers) == 2)
    elected = live.elect_leaders(ElectionType.UNCLEAN, [TopicPartition(topic, 0)]).result(30)
    assert list(elected.values()) == [None]
    wait_for("the follower leading", lambda: partition_state(live, topic) == (behind, [behind]), 10)


def run_failover(tmp_path: Path, metadata: dict[str, str]) -> None:
    with three_brokers(tmp_path, metadata) as brokers:
        bootstrap = ",".join(b.bootstrap for b in brokers.values())
        admin = AdminClient({"bootstrap.servers": bootstrap})
        wait_for("three live brokers", lambda: all_brokers_seen(brokers))
        topic = unique_topic("repl")
        futures = admin.create_topics([NewTopic(topic, 1, 3, config={"min.insync.replicas": "2"})])
        futures[topic].result(15)
        leader, isr = wait_for("a full ISR", lambda: (s := partition_state(admin, topic)) and len(s[1]) == 3 and s)

        first = produce(bootstrap, topic, [b"a%d" % i for i in range(300)])
        assert len(first) == 300
        brokers[leader].kill()
        survivors = ",".join(b.bootstrap for i, b in brokers.items() if i != leader)
        admin2 = AdminClient({"bootstrap.servers": survivors})
        new_leader, _ = wait_for("a new leader", lambda: (s := partition_state(admin2, topic)) and s[0] != leader and s)
        assert new_leader in isr
        second = produce(survivors, topic, [b"b%d" % i for i in range(300)])
        acked = first | second
        assert len(second) == 300

        got = consume_all(survivors, topic, len(acked))
        assert acked <= set(got), f"lost {len(acked - set(got))} acknowledged records"
        assert len(got) == len(set(got)), "duplicates with an idempotent producer"

        brokers[leader].start()
        wait_for(
            "the restarted broker back in the ISR",
            lambda: (s := partition_state(admin2, topic)) and leader in s[1] and len(s[1]) == 3,
            timeout_s=25,
        )
        got_again = consume_all(bootstrap, topic, len(acked))
        assert acked <= set(got_again)
        # the metrics tell the same story: the new leader took the restarted broker back into
        # the ISR and served its fetches, which appended them as a follower
        leading = brokers[new_leader].metrics()
        assert sample(leading, "kafka_server_replicamanager_isrexpands_total") >= 1
        assert sample(leading, "kafka_server_replicamanager_underreplicatedpartitions") == 0
        assert sample(leading, "kafka_server_brokertopicmetrics_replicationbytesout_total", topic=topic) > 0
        # both followers fetch from it in incremental fetch sessions (KIP-227); the clients
        # here (librdkafka) fetch without one
        assert sample(leading, "kafka_server_fetchsessioncache_numincrementalfetchsessions") >= 2
        restarted = brokers[leader].metrics()
        assert sample(restarted, "kafka_server_brokertopicmetrics_replicationbytesin_total", topic=topic) > 0
        assert sample(restarted, "kafka_log_log_logendoffset", topic=topic, partition="0") == 600
        controllers = sum(
            sample(b.metrics(), "kafka_controller_kafkacontroller_activecontrollercount") for b in brokers.values()
        )
        assert controllers == 1
        for b in brokers.values():
            assert not b.log_problems(), b.log_problems()


def test_failover_zookeeper(tmp_path: Path, zookeeper_server: Any) -> None:
    run_failover(
        tmp_path,
        {"metadata": "zookeeper", "zookeeper.connect": zookeeper_server.connect_string + unique_chroot("repl")},
    )


def test_failover_etcd(tmp_path: Path, etcd_server: Any) -> None:
    run_failover(
        tmp_path,
        {"metadata": "etcd", "etcd.endpoints": etcd_server.endpoint, "etcd.namespace": unique_chroot("repl")},
    )


def test_controlled_shutdown_and_preferred_leader(tmp_path: Path, zookeeper_server: Any) -> None:
    """SIGTERM moves leadership away before the broker exits; when it is back in sync, the
    preferred replica leads again at the controller's next leader-imbalance check (every 1 s
    here; Kafka's default, as odradek's, is 300 s)."""
    metadata = {
        "metadata": "zookeeper",
        "zookeeper.connect": zookeeper_server.connect_string + unique_chroot("cs"),
        "leader.imbalance.check.interval.seconds": "1",
    }
    with three_brokers(tmp_path, metadata) as brokers:
        bootstrap, admin, topic, leader = replicated_topic(brokers, "cs")
        assert len(produce(bootstrap, topic, [b"x%d" % i for i in range(50)])) == 50

        brokers[leader].stop()
        survivors = ",".join(b.bootstrap for i, b in brokers.items() if i != leader)
        admin2 = AdminClient({"bootstrap.servers": survivors})
        # moved by the stopping broker itself: no waiting for its metadata session to expire
        new_leader, isr = wait_for(
            "a new leader", lambda: (s := partition_state(admin2, topic)) and s[0] != leader and s
        )
        assert leader not in isr
        assert new_leader != leader
        assert len(produce(survivors, topic, [b"y%d" % i for i in range(50)])) == 50

        brokers[leader].start()
        wait_for("the preferred replica leading again", lambda: (s := partition_state(admin, topic)) and s[0] == leader)
        assert len(consume_all(bootstrap, topic, 100)) == 100
        # a follower stopped cleanly stays out of the ISR: the leader must not re-add it on the LEO
        # it last fetched (it used to, every ~1.5 s, and the controller took it out again)
        wait_for("a full ISR again", lambda: (s := partition_state(admin, topic)) and len(s[1]) == 3)
        follower = next(i for i in brokers if i != leader)
        seen = len(brokers[leader].log_path.read_text().splitlines())
        brokers[follower].stop()
        time.sleep(LAG_MS * 2 / 1000)
        changes = [
            line for line in brokers[leader].log_path.read_text().splitlines()[seen:] if f"{topic}-0: ISR" in line
        ]
        assert not any(line.endswith(f"{follower}]") or f" {follower}," in line.split("->")[-1] for line in changes), (
            changes
        )
        for b in brokers.values():
            assert not b.log_problems(), b.log_problems()


@pytest.mark.parametrize("kind", ["zookeeper", "etcd"])
def test_a_broker_past_its_session_registers_again(tmp_path: Path, kind: str, request: pytest.FixtureRequest) -> None:
    """A broker paused (or cut off) longer than its metadata session loses its registration and
    any controllership with the session. As Kafka's broker does, it registers again in the new
    session and rejoins the ISR; it used to stay unregistered for good, so the others saw it as
    dead and the leader and controller kept adding it to and removing it from the ISR."""
    metadata = metadata_settings(kind, request, "expiry")
    with three_brokers(tmp_path, metadata) as brokers:
        bootstrap, _, topic, leader = replicated_topic(brokers, "expiry")
        victim = next(i for i in brokers if i != leader)
        others = AdminClient({"bootstrap.servers": ",".join(b.bootstrap for i, b in brokers.items() if i != victim)})
        process = brokers[victim].process
        assert process is not None
        process.send_signal(signal.SIGSTOP)
        try:
            wait_for(
                "the paused broker out of the ISR", lambda: (s := partition_state(others, topic)) and victim not in s[1]
            )
            time.sleep(SESSION_MS * 2 / 1000)  # well past its session
        finally:
            process.send_signal(signal.SIGCONT)
        wait_for("three live brokers again", lambda: all_brokers_seen(brokers), timeout_s=30)
        wait_for("the broker back in the ISR", lambda: (s := partition_state(others, topic)) and victim in s[1])
        assert len(produce(bootstrap, topic, [b"z%d" % i for i in range(20)])) == 20
        for b in brokers.values():
            assert not b.log_problems(), b.log_problems()


@pytest.mark.parametrize("kind", ["zookeeper", "etcd"])
def test_a_failed_log_dir_moves_leadership_and_stops_the_broker(
    tmp_path: Path, kind: str, request: pytest.FixtureRequest
) -> None:
    """The leader's only log dir vanishes under it (renamed away, as an unmounted volume: its
    open files still work, nothing new can be created there). As in Kafka, the broker takes the
    dir's partitions offline and publishes them; the controller elects a new leader from the
    rest of the ISR and takes the broker out of it at once, so acks=all producers carry on and
    no acknowledged record is lost; with no dir left the broker exits non-zero with one ERROR
    line. Restarted with the dir back, it catches up and rejoins the ISR. Before, the broker
    kept leading and answering KAFKA_STORAGE_ERROR, the ISR kept it, and producers stalled."""
    metadata = metadata_settings(kind, request, "logdir")
    with three_brokers(tmp_path, metadata) as brokers:
        bootstrap, _, topic, leader = replicated_topic(brokers, "logdir")
        first = produce(bootstrap, topic, [b"a%d" % i for i in range(200)])
        assert len(first) == 200
        failed = brokers[leader]
        failed.data_dir.rename(failed.data_dir.with_name("data.unmounted"))
        others = AdminClient({"bootstrap.servers": ",".join(b.bootstrap for i, b in brokers.items() if i != leader)})
        _, isr = wait_for(
            "a new leader and the failed broker out of the ISR",
            lambda: (s := partition_state(others, topic)) and s[0] != leader and leader not in s[1] and s,
        )
        assert len(isr) == 2
        second = produce(bootstrap, topic, [b"b%d" % i for i in range(200)])
        assert len(second) == 200
        exited_for_its_log_dir(failed)

        acked = first | second
        survivors = ",".join(b.bootstrap for i, b in brokers.items() if i != leader)
        got = consume_all(survivors, topic, len(acked))
        assert acked <= set(got), f"lost {len(acked - set(got))} acknowledged records"
        assert len(got) == len(set(got)), "duplicates with an idempotent producer"

        failed.data_dir.with_name("data.unmounted").rename(failed.data_dir)  # repaired
        seen = len(failed.log_problems())
        failed.start()
        wait_for(
            "the repaired broker back in the ISR", lambda: (s := partition_state(others, topic)) and len(s[1]) == 3
        )
        assert acked <= set(consume_all(bootstrap, topic, len(acked)))
        assert len(failed.log_problems()) == seen, failed.log_problems()
        for i, b in brokers.items():
            if i != leader:
                assert not b.log_problems(), b.log_problems()


def test_a_failed_log_dir_of_a_follower_shrinks_the_isr_and_a_restart_without_it_catches_up(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A follower's only log dir vanishes (the controller's, when the controller follows): the
    leader stays, the controller takes the follower out of the ISR, acks=all producers carry on,
    the follower exits 1 with one line. Started again with the dir still missing, a broker with
    one log dir has nowhere that recorded it: it starts empty, catches up from the leader and
    is back in the ISR, as a replaced disk would."""
    metadata = metadata_settings("zookeeper", request, "followerdir")
    with three_brokers(tmp_path, metadata) as brokers:
        bootstrap, admin, topic, leader = replicated_topic(brokers, "followerdir")
        controller = admin.describe_cluster().result(10).controller.id
        victim = controller if controller != leader else next(i for i in brokers if i != leader)
        first = produce(bootstrap, topic, [b"a%d" % i for i in range(100)])
        assert len(first) == 100
        failed = brokers[victim]
        failed.data_dir.rename(failed.data_dir.with_name("data.unmounted"))
        others = AdminClient({"bootstrap.servers": ",".join(b.bootstrap for i, b in brokers.items() if i != victim)})
        wait_for(
            "the failed follower out of the ISR, the leader kept",
            lambda: (s := partition_state(others, topic)) and s[0] == leader and victim not in s[1],
        )
        second = produce(bootstrap, topic, [b"b%d" % i for i in range(100)])
        assert len(second) == 100
        exited_for_its_log_dir(failed)

        seen = len(failed.log_problems())
        failed.start()  # the dir still missing: created empty
        wait_for("the emptied broker back in the ISR", lambda: (s := partition_state(others, topic)) and len(s[1]) == 3)
        acked = first | second
        assert acked <= set(consume_all(failed.bootstrap, topic, len(acked)))
        assert len(failed.log_problems()) == seen, failed.log_problems()
        for i, b in brokers.items():
            if i != victim:
                assert not b.log_problems(), b.log_problems()
