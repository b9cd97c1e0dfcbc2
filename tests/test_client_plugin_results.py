"""What the client does with a partitioner's or an assignor's result that breaks the contract:
it fails at once with an error naming the plugin and the bad value, instead of hanging until
``delivery.timeout.ms`` or giving a consumer nothing without a word."""

from __future__ import annotations

import contextlib
import textwrap
import threading
import time
import types
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import pytest
import trio
from client_fakes import FakeBroker

from odradek.client import Consumer
from odradek.client.aio import AsyncConsumer, AsyncProducer
from odradek.client.assignment_check import InvalidAssignment, check_assignment
from odradek.errors import KafkaError
from odradek.hookspecs import hookimpl
from odradek.interfaces import GroupMember, MemberAssignment, TopicPartition
from odradek.manager import PluginError, Plugins, build_plugin_manager
from odradek.testing import BrokerProcess, unique_topic


def _plugins(*extra: object) -> Plugins:
    return Plugins(
        build_plugin_manager(
            entry_points_enabled=False,
            extra=["odradek.plugins.compress.plugin", "odradek.default_partitioners", *extra],
        )
    )


def _partitioner_plugin(name: str, result: Callable[[int], object]) -> types.ModuleType:
    class Fixed:
        def partition(self, topic: str, key: bytes | None, value: bytes | None, num_partitions: int) -> object:
            return result(num_partitions)

        def on_new_batch(self, topic: str, previous_partition: int, num_partitions: int) -> None:
            return None

    Fixed.name = name  # type: ignore[attr-defined]
    module = types.ModuleType(f"{name}_partitioner")
    module.odradek_register_partitioners = hookimpl(lambda: [Fixed])  # type: ignore[attr-defined]
    return module


@pytest.mark.parametrize(
    ("result", "shown"),
    [
        (lambda n: n + 3, r"returned partition 7 .* 4 partition\(s\).* 0\.\.3"),
        (lambda n: -1, r"returned partition -1 "),
        (lambda n: "1", r"returned partition '1' \(str, not an int\)"),
        (lambda n: 1.0, r"returned partition 1\.0 \(float, not an int\)"),
        (lambda n: True, r"returned partition True \(bool, not an int\)"),
        (lambda n: None, r"returned partition None \(NoneType, not an int\)"),
    ],
)
async def test_an_invalid_partitioner_result_fails_the_send_at_once(
    autojump_clock: trio.testing.MockClock, result: Callable[[int], object], shown: str
) -> None:
    broker = FakeBroker({"t": 4})
    plugins = _plugins(_partitioner_plugin("bad", result))
    config = {"bootstrap.servers": "fake:9092", "partitioner": "bad", "linger.ms": 0}
    async with AsyncProducer(config, plugins=plugins, connector=broker.connector()) as producer:
        await producer.partitions_for("t")
        start = trio.current_time()
        with pytest.raises(PluginError, match=rf"partitioner 'bad' from plugin 'bad_partitioner' {shown}") as info:
            await producer.send("t", b"x")
        assert trio.current_time() - start < 1  # no wait for delivery.timeout.ms
        assert "topic 't'" in str(info.value)
        assert not producer.accumulator.incomplete()  # nothing was enqueued


async def test_an_int_subclass_in_range_is_accepted(autojump_clock: trio.testing.MockClock) -> None:
    class Two(int):
        pass

    broker = FakeBroker({"t": 4})
    plugins = _plugins(_partitioner_plugin("subclass", lambda n: Two(2)))
    config = {"bootstrap.servers": "fake:9092", "partitioner": "subclass", "linger.ms": 0}
    async with AsyncProducer(config, plugins=plugins, connector=broker.connector()) as producer:
        metadata = await (await producer.send("t", b"x"))
        assert metadata.partition == 2 and type(metadata.partition) is int


def _temp_distribution(root: Path, monkeypatch: pytest.MonkeyPatch, dist: str, entry: str, source: str) -> None:
    """An installed distribution ``dist`` made of one module ``entry``'s plugin code, with an
    ``odradek`` entry point ``entry``: a *.dist-info directory on sys.path for this test only."""
    (root / f"{entry}.py").write_text(textwrap.dedent(source))
    info = root / f"{dist.replace('-', '_')}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[odradek]\n{entry} = {entry}\n")
    monkeypatch.syspath_prepend(str(root))


async def test_the_error_names_the_partitioners_distribution(
    autojump_clock: trio.testing.MockClock, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = """
        from odradek.hookspecs import hookimpl

        class OffByOne:
            name = "off-by-one"

            def partition(self, topic, key, value, num_partitions):
                return num_partitions

            def on_new_batch(self, topic, previous_partition, num_partitions):
                pass

        @hookimpl
        def odradek_register_partitioners():
            return [OffByOne]
    """
    _temp_distribution(tmp_path, monkeypatch, "odr-off-by-one", "odr_off_by_one", source)
    broker = FakeBroker({"t": 2})
    config = {"bootstrap.servers": "fake:9092", "partitioner": "off-by-one"}
    async with AsyncProducer(config, plugins=_plugins("odr_off_by_one"), connector=broker.connector()) as producer:
        with pytest.raises(PluginError, match="plugin 'odr_off_by_one' \\(distribution 'odr-off-by-one'\\)"):
            await producer.send("t", b"x")


# -- assignors ---------------------------------------------------------------------------------

COUNTS = {"a": 2, "b": 1}


def _member(member_id: str, *topics: str, owned: tuple[TopicPartition, ...] = (), generation: int = -1) -> GroupMember:
    return GroupMember(member_id, None, topics or ("a", "b"), owned_partitions=owned, generation=generation)


def _check(result: object, members: list[GroupMember], *, cooperative: bool = False) -> dict[str, MemberAssignment]:
    return check_assignment(result, members, COUNTS, cooperative=cooperative, culprit=lambda: "assignor 'toy'")


def _given(*tps: tuple[str, int]) -> MemberAssignment:
    return MemberAssignment([TopicPartition(t, p) for t, p in tps])


def test_a_valid_assignment_is_normalised() -> None:
    members = [_member("m1"), _member("m2", "a")]
    result = {"m1": MemberAssignment([("a", 0), ("b", 0)], b"ud"), "m2": _given(("a", 1))}
    checked = _check(result, members)
    assert checked["m1"] == MemberAssignment((TopicPartition("a", 0), TopicPartition("b", 0)), b"ud")
    assert type(checked["m1"].partitions[0]) is TopicPartition
    assert checked["m2"].partitions == (TopicPartition("a", 1),)


@pytest.mark.parametrize(
    ("result", "why"),
    [
        ([("m1", _given())], "expected a mapping of member id to MemberAssignment, got list"),
        ({"m1": _given(), "m2": _given(), "ghost": _given()}, r"member\(s\) 'ghost' are not in the group"),
        ({"m1": _given(("a", 0), ("a", 1), ("b", 0))}, r"member\(s\) 'm2' of the group are missing"),
        ({"m1": [("a", 0)], "m2": _given()}, r"member 'm1' was given \[\('a', 0\)\], not a MemberAssignment"),
        ({"m1": MemberAssignment(["a-0"]), "m2": _given()}, "member 'm1' was given 'a-0', not a"),
        ({"m1": _given(("zz", 0)), "m2": _given()}, "member 'm1' was given zz-0, a partition of unknown topic 'zz'"),
        ({"m1": _given(("a", 2)), "m2": _given()}, "member 'm1' was given a-2, but 'a' has 2 partition"),
        ({"m1": _given(("a", -1)), "m2": _given()}, "member 'm1' was given a--1, but 'a' has 2"),
        ({"m1": _given(), "m2": _given(("b", 0))}, "member 'm2' was given b-0, but it does not subscribe to 'b'"),
        ({"m1": _given(("a", 0)), "m2": _given(("a", 0))}, "partition a-0 is assigned to both 'm1' and 'm2'"),
        ({"m1": _given(("a", 0), ("a", 0)), "m2": _given()}, "partition a-0 is assigned twice to the same member"),
    ],
)
def test_an_invalid_assignment_fails_naming_the_assignor(result: object, why: str) -> None:
    with pytest.raises(InvalidAssignment, match=rf"^assignor 'toy' returned an invalid assignment: {why}"):
        _check(result, [_member("m1"), _member("m2", "a")])


def test_invalid_assignment_is_a_plugin_error_and_a_non_retriable_kafka_error() -> None:
    error = InvalidAssignment("x")
    assert isinstance(error, PluginError) and isinstance(error, KafkaError) and not error.retriable


def test_cooperative_moves_must_go_through_a_revocation() -> None:
    owned = (TopicPartition("a", 0),)
    members = [_member("m1", owned=owned, generation=3), _member("m2")]
    moved = {"m1": _given(), "m2": _given(("a", 0))}
    with pytest.raises(InvalidAssignment, match="cooperative protocol, a-0 moves from its owner 'm1' to 'm2'"):
        _check(moved, members, cooperative=True)
    assert _check(moved, members)["m2"].partitions == owned  # eager: everything was revoked already
    assert _check({"m1": _given(), "m2": _given()}, members, cooperative=True)  # withheld for one round
    assert _check({"m1": _given(("a", 0)), "m2": _given()}, members, cooperative=True)  # kept


def test_cooperative_owner_is_the_claimant_of_the_newest_generation() -> None:
    owned = (TopicPartition("a", 0),)
    stale = [_member("m1", owned=owned, generation=2), _member("m2", owned=owned, generation=3)]
    assert _check({"m1": _given(), "m2": _given(("a", 0))}, stale, cooperative=True)  # m1's claim is stale
    with pytest.raises(InvalidAssignment, match="from its owner 'm2' to 'm1'"):
        _check({"m1": _given(("a", 0)), "m2": _given()}, stale, cooperative=True)
    tie = [_member("m1", owned=owned, generation=3), _member("m2", owned=owned, generation=3)]
    assert _check({"m1": _given(("a", 0)), "m2": _given()}, tie, cooperative=True)  # nobody owns it


def test_a_subscribed_topic_left_unassigned_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    _check({"m1": _given(("a", 0)), "m2": _given()}, [_member("m1"), _member("m2", "a")])
    assert "subscribed topic(s) ['b'] unassigned" in caplog.text


class _Greedy:
    """Gives every partition to every member: two consumers would read one partition."""

    name = "greedy"
    rebalance_protocol = "eager"

    def subscription_user_data(
        self, topics: Sequence[str], owned: Sequence[TopicPartition], generation: int
    ) -> bytes | None:
        return None

    def assign(
        self, partitions_per_topic: Mapping[str, int], members: Sequence[GroupMember]
    ) -> dict[str, MemberAssignment]:
        every = [TopicPartition(t, p) for t, n in partitions_per_topic.items() for p in range(n)]
        return {m.member_id: MemberAssignment(every) for m in members} | {"ghost": MemberAssignment([])}

    def on_assignment(self, assignment: MemberAssignment, generation: int) -> None:
        return None


def test_the_leader_fails_the_rebalance_and_poll_names_the_assignor(odradek_broker: BrokerProcess) -> None:
    topic = unique_topic("bad-assignor")
    greedy = types.ModuleType("greedy_assignor")
    greedy.odradek_register_assignors = hookimpl(lambda: [_Greedy])  # type: ignore[attr-defined]
    plugins = Plugins(build_plugin_manager(extra=[greedy]))

    async def main() -> None:
        config = {
            "bootstrap.servers": odradek_broker.bootstrap,
            "group.id": unique_topic("g"),
            "partition.assignment.strategy": "greedy",
        }
        async with AsyncConsumer(config, plugins=plugins) as consumer:
            consumer.subscribe([topic])
            with pytest.raises(InvalidAssignment, match="assignor 'greedy' from plugin 'greedy_assignor'.*'ghost'"):
                for _ in range(20):
                    await consumer.poll(timeout=1.0)
            assert consumer.assignment() == set()

    trio.run(main)


class _Thief(_Greedy):
    """Cooperative, and moves every partition straight to a member that owns none (KIP-429
    wants a revocation first): valid in the first rebalance, invalid once someone owns them."""

    name = "thief"
    rebalance_protocol = "cooperative"

    def assign(
        self, partitions_per_topic: Mapping[str, int], members: Sequence[GroupMember]
    ) -> dict[str, MemberAssignment]:
        every = [TopicPartition(t, p) for t, n in partitions_per_topic.items() for p in range(n)]
        ordered = sorted(members, key=lambda m: (bool(m.owned_partitions), m.member_id))
        return {m.member_id: MemberAssignment(every if m is ordered[0] else []) for m in members}


def test_a_cooperative_members_invalid_assignment_reaches_poll(odradek_broker: BrokerProcess) -> None:
    """A cooperative member that owns partitions does not wait for its rejoin; the assignor's
    InvalidAssignment must still reach its poll() (it was dropped when the next join started,
    and the rebalance was retried for ever)."""
    topic = unique_topic("thief")
    thief = types.ModuleType("thief_assignor")
    thief.odradek_register_assignors = hookimpl(lambda: [_Thief])  # type: ignore[attr-defined]
    plugins = Plugins(build_plugin_manager(extra=[thief]))
    config = {
        "bootstrap.servers": odradek_broker.bootstrap,
        "group.id": unique_topic("g"),
        "partition.assignment.strategy": "thief",
        "allow.auto.create.topics": "true",
        "heartbeat.interval.ms": "300",
        "enable.auto.commit": "false",
        # the second member's close waits behind its SyncGroup, parked at the coordinator since
        # the leader failed the rebalance: bounded by the request timeout (Java's close is too)
        "request.timeout.ms": "3000",
    }
    stop = threading.Event()

    def second_member() -> None:
        with Consumer(config, plugins=plugins) as second:
            second.subscribe([topic])
            while not stop.is_set():
                with contextlib.suppress(KafkaError):
                    second.poll(0.3)

    with Consumer(config, plugins=plugins) as first:
        first.subscribe([topic])
        deadline = time.monotonic() + 30
        while not first.assignment() and time.monotonic() < deadline:
            first.poll(0.3)
        assert first.assignment()
        thread = threading.Thread(target=second_member)
        thread.start()
        try:
            with pytest.raises(InvalidAssignment, match="assignor 'thief'.*moves from its owner"):
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline:
                    first.poll(0.3)
        finally:
            stop.set()
            thread.join()


def test_an_async_with_body_ending_in_a_cancelled_scope_closes_the_client(odradek_broker: BrokerProcess) -> None:
    """Leaving ``async with AsyncConsumer(...)`` after the enclosing nursery was cancelled cancels
    close() too; the client's own nursery must still be closed, or trio reports its stack of
    nurseries corrupted (found while writing the test above, with the second member in a task)."""

    async def main() -> None:
        config = {"bootstrap.servers": odradek_broker.bootstrap, "group.id": unique_topic("g")}
        async with trio.open_nursery() as nursery, AsyncConsumer(config) as consumer:
            consumer.subscribe([unique_topic("cancelled")])
            await consumer.poll(timeout=0.5)
            nursery.cancel_scope.cancel()

    trio.run(main)
