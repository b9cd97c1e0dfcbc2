"""Conformance suite for the replica selector role (``ReplicaSelector`` in odradek.replica_selector).

A replica selector plugin -- the built-in ``leader`` and ``rack-aware`` or a third party's -- runs
it against itself with one line in a test module::

    TestMySelector = check_replica_selector(MySelector)   # the class the hook registers

or by subclassing :class:`ReplicaSelectorConformance` and setting ``selector``.

What a selector must honour, and why (the broker calls it for every partition of every consumer
Fetch v11+ when ``replica.selector.class`` names it, and sends the consumer where it says):

- the registered class has a ``name`` (what ``replica.selector.class`` selects) and is made with
  no arguments, one instance per broker;
- ``select(tp, client, partition)`` returns None or one of ``partition.replicas`` (the broker
  offers only replicas a consumer may be sent to: another answer would send it nowhere), for
  clients with and without a rack, partitions whose only candidate is the leader, replicas with
  unknown log ends (-1) and racks (None);
- it is a function of its arguments: the same call gives the same replica (a consumer bounced
  between replicas on each fetch would read nothing), and it leaves its arguments as they were.
"""

from __future__ import annotations

import random
from typing import Any, ClassVar

from ..interfaces import TopicPartition
from ..replica_selector import ClientMetadata, PartitionView, ReplicaSelector, ReplicaView
from ._suite import registered_class, suite_for

__all__ = ["ReplicaSelectorConformance", "check_replica_selector"]

RACKS: tuple[str | None, ...] = (None, "a", "b", "c", "eu-west-1a")
TP = TopicPartition("orders", 3)


def random_views(seed: int, count: int = 200) -> list[tuple[ClientMetadata, PartitionView]]:
    """Random (client, partition) pairs: 0-5 followers, racks from :data:`RACKS`, log ends and
    lags known or not, clients with and without a rack."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        leader_id = rng.randrange(10)
        leader = ReplicaView(leader_id, rng.choice(RACKS), rng.randrange(1000), 0)
        others = rng.sample([b for b in range(10) if b != leader_id], rng.randint(0, 5))
        followers = [
            ReplicaView(
                b,
                rng.choice(RACKS),
                rng.choice((-1, rng.randrange(1000))),
                rng.choice((-1, rng.randrange(100_000))),
            )
            for b in others
        ]
        replicas = [leader, *followers]
        rng.shuffle(replicas)
        rack = rng.choice(("", "a", "b", "c", "eu-west-1a", "nowhere"))
        client = ClientMetadata(rack, f"client-{i}", f"10.0.0.{i % 250}:5{i % 1000:03d}", "User:ANONYMOUS", "PLAINTEXT")
        out.append((client, PartitionView(leader, tuple(replicas))))
    return out


class ReplicaSelectorConformance:
    """Base class of a replica selector's conformance tests; see the module docstring."""

    #: The selector class the plugin registers (``odradek_register_replica_selectors``).
    selector: ClassVar[Any] = None

    def selector_class(self) -> type[Any]:
        return registered_class(self, "selector")

    def make(self) -> ReplicaSelector:
        made: ReplicaSelector = self.selector_class()()
        return made

    def check(self, got: Any, partition: PartitionView, what: str) -> None:
        assert got is None or isinstance(got, ReplicaView), f"{what}: select() returned {got!r}"
        if got is not None:
            assert got in partition.replicas, f"{what}: {got!r} is not one of the replicas offered"

    def test_name_and_protocol(self) -> None:
        cls = self.selector_class()
        name = getattr(cls, "name", None)
        assert isinstance(name, str) and name.strip() == name != "", f"{cls.__name__}.name is {name!r}"
        assert isinstance(self.make(), ReplicaSelector), "the selector lacks name or select"

    def test_answers_one_of_the_replicas_offered(self) -> None:
        selector = self.make()
        for i, (client, partition) in enumerate(random_views(3)):
            self.check(selector.select(TP, client, partition), partition, f"case {i} (client rack {client.rack_id!r})")

    def test_leader_alone(self) -> None:
        """A partition whose only candidate is the leader: the leader or None."""
        selector = self.make()
        for rack in ("", "a", "b"):
            leader = ReplicaView(1, "a", 10, 0)
            client = ClientMetadata(rack, "c", "127.0.0.1:1", "User:ANONYMOUS", "PLAINTEXT")
            got = selector.select(TP, client, PartitionView(leader, (leader,)))
            assert got in (None, leader), f"client rack {rack!r}: {got!r} with only the leader offered"

    def test_same_question_same_answer(self) -> None:
        """Deterministic, and leaves its arguments alone: a second instance and a repeated call
        agree, and each view is unchanged after the call."""
        first, second = self.make(), self.make()
        for i, (client, partition) in enumerate(random_views(9, 100)):
            before = (client, partition.leader, tuple(partition.replicas))
            got = first.select(TP, client, partition)
            assert first.select(TP, client, partition) == got, f"case {i}: a repeated call changed its answer"
            assert second.select(TP, client, partition) == got, f"case {i}: another instance answered otherwise"
            assert (client, partition.leader, tuple(partition.replicas)) == before, f"case {i}: arguments changed"


def check_replica_selector(selector: type[Any], **attributes: Any) -> type[ReplicaSelectorConformance]:
    """A ``ReplicaSelectorConformance`` subclass for ``selector``; assign it to a ``Test*`` name::

    TestMySelector = check_replica_selector(MySelector)
    """
    return suite_for(
        ReplicaSelectorConformance, "ReplicaSelectorConformanceSuite", {"selector": selector, **attributes}
    )
