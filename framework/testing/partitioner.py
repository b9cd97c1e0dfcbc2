"""Conformance suite for the partitioner role (``Partitioner`` in odradek.interfaces).

A partitioner plugin -- the built-in murmur2, sticky and roundrobin or a third party's -- runs it
against itself with one line in a test module::

    TestMyPartitioner = check_partitioner(MyPartitioner)   # the class the hook registers

or by subclassing :class:`PartitionerConformance` and setting ``partitioner``.

What a partitioner must honour, and why (the producer calls it for every record without an
explicit partition, then appends to that partition's batch):

- the registered class has a ``name`` (the producer's ``partitioner`` setting selects it) and is
  made with no arguments, one instance per producer;
- ``partition(topic, key, value, num_partitions)`` returns an ``int`` in ``range(num_partitions)``
  for keyed and keyless records, ``None`` or empty keys and values, one partition, many, and a
  partition count that changes between calls (a topic that grew, or was re-created smaller);
- ``on_new_batch(topic, previous_partition, num_partitions)`` may be called at any time and
  leaves every later result in range (sticky partitioners switch partitions there, KIP-480);
- with ``key_determines_partition`` (the default; set it to False for partitioners that ignore
  keys, as ``sticky`` and ``roundrobin`` do) a keyed record's partition in a topic depends only
  on its key and the partition count: the same in every instance, whatever the value and
  whatever was called before. Consumers and compaction rely on one key living in one partition.

The interface has no list of available partitions (Java's ``Cluster`` argument), so there is
nothing to check about partitions without a leader.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any, ClassVar

from ..interfaces import Partitioner
from ._suite import registered_class, suite_for

__all__ = ["PartitionerConformance", "check_partitioner"]

KEYS: tuple[bytes | None, ...] = (None, b"", b"a", b"alice", b"\x00\xff" * 3, bytes(range(256)), b"k" * 10_000)
VALUES: tuple[bytes | None, ...] = (None, b"", b"v", b"x" * 1000)
COUNTS: tuple[int, ...] = (1, 2, 3, 7, 12, 100, 1000)
TOPICS: tuple[str, ...] = ("orders", "visits")


class PartitionerConformance:
    """Base class of a partitioner's conformance tests; see the module docstring."""

    #: The partitioner class the plugin registers (``odradek_register_partitioners``).
    partitioner: ClassVar[Any] = None
    #: False for partitioners that ignore keys (sticky, round robin).
    key_determines_partition: ClassVar[bool] = True

    def partitioner_class(self) -> type[Any]:
        return registered_class(self, "partitioner")

    def make(self) -> Partitioner:
        made: Partitioner = self.partitioner_class()()
        return made

    def check(self, got: Any, n: int, what: str) -> int:
        assert type(got) is int, f"{what}: partition() returned {got!r}, not an int"
        assert 0 <= got < n, f"{what}: partition {got} is outside range({n})"
        return got

    def test_name_and_protocol(self) -> None:
        cls = self.partitioner_class()
        name = getattr(cls, "name", None)
        assert isinstance(name, str) and name.strip() == name != "", f"{cls.__name__}.name is {name!r}"
        instance = self.make()
        assert isinstance(instance, Partitioner), f"{instance!r} lacks name, partition or on_new_batch"

    def test_results_in_range(self) -> None:
        p = self.make()
        for n in COUNTS:
            for topic in TOPICS:
                for key in KEYS:
                    for value in VALUES:
                        got = self.check(p.partition(topic, key, value, n), n, f"key {key!r:.20}, {n} partitions")
                        p.on_new_batch(topic, got, n)

    def test_one_partition(self) -> None:
        p = self.make()
        for key in KEYS:
            assert p.partition("t", key, b"v", 1) == 0, f"key {key!r:.20} with one partition"
            p.on_new_batch("t", 0, 1)
            assert p.partition("t", key, None, 1) == 0

    def test_partition_count_changes(self) -> None:
        """Metadata refreshes change the count between calls: results follow the new count."""
        p = self.make()
        rng = random.Random(11)
        n = 8
        for step in range(300):
            key = rng.choice(KEYS)
            got = self.check(p.partition("t", key, b"v", n), n, f"step {step}, key {key!r:.20}, {n} partitions")
            if rng.random() < 0.3:
                p.on_new_batch("t", got, n)
            if rng.random() < 0.1:
                n = rng.choice((1, 2, 3, 8, 16, 64))

    def test_many_records_between_batches(self) -> None:
        """A sticky partitioner's case: many records, batches closing at random moments."""
        p = self.make()
        rng = random.Random(5)
        seen: set[int] = set()
        for _ in range(2000):
            got = self.check(p.partition("t", None, b"v", 6), 6, "keyless record, 6 partitions")
            seen.add(got)
            if rng.random() < 0.05:
                p.on_new_batch("t", got, 6)
        assert seen, "no partition was chosen"

    def test_same_key_same_partition(self) -> None:
        """Only for partitioners that place by key: ``check_partitioner(..., key_determines_partition=False)``
        leaves this check out of the suite (a suite subclassed by hand fails here instead)."""
        assert self.key_determines_partition, (
            "this partitioner ignores keys: build its suite with check_partitioner(cls, "
            "key_determines_partition=False), which leaves this check out"
        )
        rng = random.Random(7)
        keys: Sequence[bytes] = [k for k in KEYS if k is not None] + [
            rng.randbytes(rng.randint(1, 40)) for _ in range(200)
        ]
        first, second = self.make(), self.make()
        for n in COUNTS:
            expected = {key: first.partition("t", key, b"v", n) for key in keys}
            for key in rng.sample(list(keys), len(keys)):
                second.on_new_batch("t", rng.randrange(n), n)
                got = second.partition("t", key, rng.choice(VALUES), n)
                assert got == expected[key], f"key {key!r:.20} with {n} partitions: {got} now, {expected[key]} before"


def check_partitioner(partitioner: type[Any], **attributes: Any) -> type[PartitionerConformance]:
    """A ``PartitionerConformance`` subclass for ``partitioner``; assign it to a ``Test*`` name::

    TestMyPartitioner = check_partitioner(MyPartitioner)
    """
    fields = {"partitioner": partitioner, **attributes}
    if fields.get("key_determines_partition", True) is False:
        fields["test_same_key_same_partition"] = None  # does not apply: not collected rather than skipped
    return suite_for(PartitionerConformance, "PartitionerConformanceSuite", fields)
