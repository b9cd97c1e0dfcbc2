"""Helpers of the consumer-group integration tests: subprocess librdkafka members, in-process
kafka-python and aiokafka members, and a merged event timeline with the group invariants."""

from __future__ import annotations

import abc
import asyncio
import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.testing import BrokerProcess, unique_topic

HERE = Path(__file__).resolve().parent
TIMEOUT_S = 30.0
SESSION_MS = 3000

#: what the group tests' broker changes: fast first rebalance, short sessions allowed
GROUP_BROKER_SETTINGS = {
    "group.initial.rebalance.delay.ms": 0,
    "group.min.session.timeout.ms": 1000,
    "offsets.topic.num.partitions": 10,
}


def wait_for(condition: Callable[[], bool], what: str, timeout_s: float = TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def create_topic(broker: BrokerProcess, topic: str, partitions: int) -> None:
    """Create the topic and wait until its metadata shows every partition with a leader: a
    client whose first metadata lacks the topic assigns nothing (kafka-python then waits for its
    next metadata refresh, minutes away), which would test the clients, not the group."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(TIMEOUT_S)

    def ready() -> bool:
        meta = admin.list_topics(topic, timeout=TIMEOUT_S).topics.get(topic)
        return (
            meta is not None
            and meta.error is None
            and len(meta.partitions) == partitions
            and all(p.leader >= 0 for p in meta.partitions.values())
        )

    wait_for(ready, f"metadata of {topic}")


class Produced:
    """Produces to explicit partitions and remembers how many records each holds."""

    def __init__(self, broker: BrokerProcess, topic: str, partitions: int) -> None:
        self.topic = topic
        self.counts = [0] * partitions
        self.producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 2})

    def batch(self, per_partition: int) -> None:
        for p in range(len(self.counts)):
            for _ in range(per_partition):
                self.producer.produce(self.topic, value=b"v%d" % self.counts[p], partition=p)
                self.counts[p] += 1
        assert self.producer.flush(TIMEOUT_S) == 0


class ConsumerProc:
    """One librdkafka consumer subprocess and the events it printed."""

    def __init__(self, name: str, broker: BrokerProcess, group: str, topic: str, strategy: str, **extra: str) -> None:
        self.name = name
        self.events: list[dict[str, Any]] = []
        self.ended_at: float | None = None
        cmd = [sys.executable, str(HERE / "group_consumer_proc.py"), "--bootstrap", broker.bootstrap,
               "--group", group, "--topic", topic, "--strategy", strategy,
               "--session-timeout-ms", str(extra.pop("session_ms", SESSION_MS))]  # fmt: skip
        for key, value in extra.items():
            cmd += [f"--{key.replace('_', '-')}", value]
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            event = json.loads(line)
            event["who"] = self.name
            self.events.append(event)

    @property
    def owned(self) -> set[int]:
        for event in reversed(self.events):
            if event["ev"] in ("assign", "revoke"):
                return {p for _, p in event["owned"]}
        return set()

    @property
    def alive(self) -> bool:
        return self.ended_at is None

    def stop(self) -> None:
        """SIGTERM: close() runs (revoke, commit, LeaveGroup for dynamic members)."""
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(TIMEOUT_S)
        self._reader.join(TIMEOUT_S)
        self.ended_at = time.time()

    def kill(self) -> None:
        """SIGKILL: no goodbye; the coordinator notices when the session times out."""
        self.ended_at = time.time()
        self.proc.kill()
        self.proc.wait(TIMEOUT_S)
        self._reader.join(TIMEOUT_S)


class Member(Protocol):
    """What the invariants need of a group member, whatever client it runs."""

    name: str
    events: list[dict[str, Any]]
    ended_at: float | None

    @property
    def owned(self) -> set[int]: ...

    @property
    def alive(self) -> bool: ...

    def stop(self) -> None: ...


def _event(sink: list[dict[str, Any]], who: str, event: str, **fields: Any) -> None:
    sink.append({"ev": event, "t": time.time(), "who": who, **fields})


class ThreadMember(abc.ABC):
    """Base of in-process members (kafka-python, aiokafka): a thread running the client."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.events: list[dict[str, Any]] = []
        self.ended_at: float | None = None
        self.errors: list[BaseException] = []
        self._owned: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._guarded, name=name, daemon=True)

    def start(self) -> ThreadMember:
        self._thread.start()
        return self

    def _guarded(self) -> None:
        try:
            self.run()
        except BaseException as exc:  # surfaced by stop()
            self.errors.append(exc)

    @abc.abstractmethod
    def run(self) -> None:
        """The client's poll loop, until ``self._stop`` is set."""

    def on_assigned(self, parts: list[int]) -> None:
        self._owned.update(parts)
        _event(self.events, self.name, "assign", parts=[["", p] for p in sorted(parts)], owned=sorted(self._owned))

    def on_revoked(self, parts: list[int]) -> None:
        self._owned.difference_update(parts)
        _event(self.events, self.name, "revoke", parts=[["", p] for p in sorted(parts)], owned=sorted(self._owned))

    @property
    def owned(self) -> set[int]:
        return set(self._owned)

    @property
    def alive(self) -> bool:
        return self.ended_at is None

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(TIMEOUT_S)
        self.ended_at = time.time()
        assert not self._thread.is_alive(), f"{self.name} did not stop"
        assert not self.errors, f"{self.name} failed: {self.errors!r}"


class KafkaPythonMember(ThreadMember):
    """A kafka-python KafkaConsumer in a thread, committing synchronously after each record."""

    def __init__(self, name: str, broker: BrokerProcess, group: str, topic: str, assignor: str) -> None:
        super().__init__(name)
        self.broker, self.group, self.topic, self.assignor = broker, group, topic, assignor

    def run(self) -> None:
        from kafka import ConsumerRebalanceListener, KafkaConsumer, OffsetAndMetadata
        from kafka.coordinator.assignors.range import RangePartitionAssignor
        from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

        member = self

        class Listener(ConsumerRebalanceListener):
            def on_partitions_revoked(self, revoked: Any) -> None:
                member.on_revoked([tp.partition for tp in revoked])

            def on_partitions_assigned(self, assigned: Any) -> None:
                member.on_assigned([tp.partition for tp in assigned])

        assignor = {"range": RangePartitionAssignor, "roundrobin": RoundRobinPartitionAssignor}[self.assignor]
        consumer = KafkaConsumer(
            bootstrap_servers=self.broker.bootstrap, group_id=self.group, client_id=self.name,
            enable_auto_commit=False, auto_offset_reset="earliest", session_timeout_ms=SESSION_MS,
            heartbeat_interval_ms=500, partition_assignment_strategy=[assignor],
        )  # fmt: skip
        consumer.subscribe([self.topic], listener=Listener())
        try:
            while not self._stop.is_set():
                # kafka-python 3.0 can wedge its main thread when poll() gives up (timeout) while
                # a SyncGroup it sent is being answered; a poll long enough to see a rebalance
                # through avoids that client-side race
                for tp, records in consumer.poll(timeout_ms=1000).items():
                    for record in records:
                        _event(self.events, self.name, "msg", p=tp.partition, o=record.offset)
                        try:
                            consumer.commit({tp: OffsetAndMetadata(record.offset + 1, "", -1)})
                        except Exception as exc:  # CommitFailedError during a rebalance
                            _event(self.events, self.name, "commit_failed", p=tp.partition, error=repr(exc))
                        else:
                            _event(self.events, self.name, "commit", p=tp.partition, o=record.offset + 1)
        finally:
            consumer.close()


class AioKafkaMember(ThreadMember):
    """An aiokafka AIOKafkaConsumer on its own asyncio loop in a thread."""

    def __init__(self, name: str, broker: BrokerProcess, group: str, topic: str) -> None:
        super().__init__(name)
        self.broker, self.group, self.topic = broker, group, topic

    def run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener
        from aiokafka.structs import OffsetAndMetadata

        member = self

        class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
            async def on_partitions_revoked(self, revoked: Any) -> None:
                member.on_revoked([tp.partition for tp in revoked])

            async def on_partitions_assigned(self, assigned: Any) -> None:
                member.on_assigned([tp.partition for tp in assigned])

        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.broker.bootstrap, group_id=self.group, client_id=self.name,
            enable_auto_commit=False, auto_offset_reset="earliest", session_timeout_ms=SESSION_MS,
            heartbeat_interval_ms=500,
        )  # fmt: skip
        consumer.subscribe([self.topic], listener=Listener())
        await consumer.start()
        try:
            while not self._stop.is_set():
                batches = await consumer.getmany(timeout_ms=100)
                for tp, records in batches.items():
                    for record in records:
                        _event(self.events, self.name, "msg", p=tp.partition, o=record.offset)
                        try:
                            await consumer.commit({tp: OffsetAndMetadata(record.offset + 1, "")})
                        except Exception as exc:  # CommitFailedError during a rebalance
                            _event(self.events, self.name, "commit_failed", p=tp.partition, error=repr(exc))
                        else:
                            _event(self.events, self.name, "commit", p=tp.partition, o=record.offset + 1)
        finally:
            await consumer.stop()


class Group:
    def __init__(self, broker: BrokerProcess, topic: str, partitions: int, strategy: str) -> None:
        self.broker = broker
        self.topic = topic
        self.partitions = partitions
        self.strategy = strategy
        self.group = unique_topic("grp")
        self.members: list[Member] = []

    def add(self, name: str, **extra: str) -> ConsumerProc:
        """A librdkafka member in a subprocess (``strategy=`` overrides the group's for it)."""
        strategy = extra.pop("strategy", self.strategy)
        member = ConsumerProc(name, self.broker, self.group, self.topic, strategy, **extra)
        self.members.append(member)
        return member

    def add_member(self, member: ThreadMember) -> ThreadMember:
        """An in-process member (kafka-python, aiokafka), started."""
        self.members.append(member)
        return member.start()

    def live(self) -> list[Member]:
        return [m for m in self.members if m.alive]

    def settled(self) -> bool:
        """Every partition owned by exactly one live member, and owners balanced."""
        live = self.live()
        owned = [m.owned for m in live]
        flat = [p for s in owned for p in s]
        if sorted(flat) != list(range(self.partitions)):
            return False
        low, high = divmod(self.partitions, len(live))
        return all(low <= len(s) <= low + (1 if high else 0) for s in owned)

    def consumed(self, produced: Produced) -> bool:
        seen: dict[int, set[int]] = defaultdict(set)
        for m in self.members:
            for e in list(m.events):
                if e["ev"] == "msg":
                    seen[e["p"]].add(e["o"])
        return all(len(seen[p]) == n for p, n in enumerate(produced.counts))

    def settle_and_drain(self, produced: Produced, what: str) -> None:
        wait_for(self.settled, f"group to settle ({what})")
        produced.batch(10)
        wait_for(lambda: self.consumed(produced), f"all records consumed ({what})")

    def timeline(self) -> list[dict[str, Any]]:
        return sorted((e for m in self.members for e in m.events), key=lambda e: e["t"])

    def check(self, produced: Produced) -> dict[str, int]:
        """The invariants over the whole run; returns redelivery counts per partition."""
        # 1. ownership intervals of different members never overlap
        intervals: dict[int, list[tuple[float, float, str]]] = defaultdict(list)
        for m in self.members:
            since: dict[int, float] = {}
            for e in m.events:
                if e["ev"] == "assign":
                    for _, p in e["parts"]:
                        since.setdefault(p, e["t"])
                elif e["ev"] == "revoke":
                    for _, p in e["parts"]:
                        if p in since:
                            intervals[p].append((since.pop(p), e["t"], m.name))
            end = m.ended_at or time.time()
            for p, start in since.items():
                intervals[p].append((start, end, m.name))
        for p, spans in intervals.items():
            spans.sort()
            for (_s1, e1, who1), (s2, _, who2) in itertools.pairwise(spans):
                assert e1 <= s2, f"partition {p} owned by {who1} and {who2} at once ({s2} < {e1})"
        # 2. nothing lost; 3. a redelivered offset was never committed past before
        seen: dict[int, set[int]] = defaultdict(set)
        committed: dict[int, int] = defaultdict(int)
        redelivered: dict[str, int] = defaultdict(int)
        for e in self.timeline():
            if e["ev"] == "commit":
                committed[e["p"]] = max(committed[e["p"]], e["o"])
            elif e["ev"] == "msg":
                p, o = e["p"], e["o"]
                if o in seen[p]:
                    assert o >= committed[p], (
                        f"{self.topic}-{p} offset {o} redelivered after a commit of {committed[p]}"
                    )
                    redelivered[str(p)] += 1
                seen[p].add(o)
        for p, n in enumerate(produced.counts):
            assert seen[p] == set(range(n)), f"partition {p} lost {sorted(set(range(n)) - seen[p])}"
        return dict(redelivered)

    def close(self) -> None:
        for m in self.live():
            m.stop()


def check_static_restart(group: Group, produced: Produced, *, kill: bool, **extra: str) -> None:
    """Two static members settle; ``s1`` goes (killed, or closed: a KIP-848 member then leaves
    with epoch -2) and its instance comes back under a new member id: it gets its partitions
    back, and ``s2`` sees no rebalance."""
    s1 = group.add("s1", instance_id="static-1", **extra)
    s2 = group.add("s2", instance_id="static-2", **extra)
    group.settle_and_drain(produced, "two static members")
    before = s1.owned

    def rebalances() -> int:
        return len([e for e in s2.events if e["ev"] in ("assign", "revoke")])

    seen = rebalances()
    if kill:
        s1.kill()
    else:
        s1.stop()
    s1_again = group.add("s1-restarted", instance_id="static-1", **extra)
    wait_for(lambda: s1_again.owned == before, "the restarted static member to get its partitions back")
    produced.batch(5)
    wait_for(lambda: group.consumed(produced), "records consumed after the restart")
    assert rebalances() == seen, "the other member saw a rebalance"
