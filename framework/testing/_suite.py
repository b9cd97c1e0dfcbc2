"""What every conformance suite's one-line ``check_*`` helper shares."""

from __future__ import annotations

import random
import sys
from collections.abc import Iterator
from typing import Any, TypeVar

import pytest

S = TypeVar("S", bound=type)


def suite_for(base: S, name: str, attributes: dict[str, Any], *, depth: int = 2) -> S:
    """A subclass of ``base`` with ``attributes``, belonging to the module that called the
    ``check_*`` helper ``depth - 1`` frames up: pytest collects it there, under the ``Test*`` name
    it is assigned to, and reports failures against that module."""
    caller = sys._getframe(depth).f_globals.get("__name__", __name__)
    cls: S = type(name, (base,), attributes)  # type: ignore[assignment]
    cls.__module__ = caller
    return cls


def registered_class(suite: object, attribute: str) -> type[Any]:
    """The class a suite checks, from its ``attribute`` (set on the suite class by ``check_*`` or
    a subclass); fails the test with what to set when it is missing or not a class."""
    cls = getattr(type(suite), attribute, None)
    if not isinstance(cls, type):
        pytest.fail(f"{type(suite).__name__} must set `{attribute}` to the class the hook registers, not {cls!r}")
    return cls


#: one random group: partition count per topic, and members as (member id, topics, instance id)
RandomGroup = tuple[dict[str, int], list[tuple[str, list[str], str | None]]]


def random_groups(seed: int, count: int = 30) -> Iterator[RandomGroup]:
    """Random groups for the assignor suites: 1-5 topics of 0-9 partitions, 1-8 members each
    subscribed to some of them and to a topic that does not exist, a few of them static."""
    rng = random.Random(seed)
    for _ in range(count):
        partitions = {f"t{i}": rng.randint(0, 9) for i in range(rng.randint(1, 5))}
        names = [*partitions, "missing"]
        members = []
        for i in range(rng.randint(1, 8)):
            static = f"static-{i}" if rng.random() < 0.3 else None
            members.append((f"member-{rng.randrange(1000)}-{i}", rng.sample(names, rng.randint(1, len(names))), static))
        yield partitions, members
