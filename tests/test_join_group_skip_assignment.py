"""JoinGroup v9 (KIP-814) over the wire: a static leader restarted into a Stable group (a
JoinGroup with its ``group.instance.id``, no member id and unchanged protocols) is answered
without a rebalance as Kafka answers it: from v9 as the leader with every member's metadata and
``skip_assignment``; before v9 with the previous leader id and no members, so it takes itself
for a follower. A restarted follower gets no members and no ``skip_assignment`` at any version."""

from __future__ import annotations

from typing import Any

import trio
from test_groups_apis import GROUP, SUBSCRIPTION, Wire, build, ms, nested
from test_groups_apis import wire as wire  # the fixture, under its own name

from odradek.protocol import ApiKey


async def static_join(
    wire: Wire, version: int, instance: str, member_id: str = "", metadata: bytes = SUBSCRIPTION
) -> Any:
    protocol = nested(ApiKey.JOIN_GROUP, version, "JoinGroupRequestProtocol", name="range", metadata=metadata)
    request = build(
        ApiKey.JOIN_GROUP, version, group_id=GROUP, session_timeout=ms(10_000), rebalance_timeout=ms(20_000),
        member_id=member_id, group_instance_id=instance, protocol_type="consumer", protocols=(protocol,),
        reason=None,
    )  # fmt: skip
    return await wire.call(ApiKey.JOIN_GROUP, version, request)


async def sync(wire: Wire, generation: int, member_id: str, instance: str, assignments: dict[str, bytes]) -> Any:
    entries = tuple(
        nested(ApiKey.SYNC_GROUP, 5, "SyncGroupRequestAssignment", member_id=m, assignment=a)
        for m, a in assignments.items()
    )
    request = build(
        ApiKey.SYNC_GROUP, 5, group_id=GROUP, generation_id=generation, member_id=member_id,
        group_instance_id=instance, protocol_type="consumer", protocol_name="range", assignments=entries,
    )  # fmt: skip
    return await wire.call(ApiKey.SYNC_GROUP, 5, request)


async def heartbeat(wire: Wire, generation: int, member_id: str, instance: str) -> int:
    request = build(
        ApiKey.HEARTBEAT, 4, group_id=GROUP, generation_id=generation, member_id=member_id, group_instance_id=instance
    )
    return int((await wire.call(ApiKey.HEARTBEAT, 4, request)).error_code)


async def stable_group_of_two(wire: Wire) -> tuple[str, str, int]:
    """Static members "ia" (the leader) and "ib", synced: (leader id, follower id, generation)."""
    await wire.call(ApiKey.FIND_COORDINATOR, 2, build(ApiKey.FIND_COORDINATOR, 2, key=GROUP, key_type=0))
    first = await static_join(wire, 9, "ia")
    await sync(wire, first.generation_id, first.member_id, "ia", {first.member_id: b"A"})
    answers: dict[str, Any] = {}

    async def join_as(instance: str, member_id: str) -> None:
        answers[instance] = await static_join(Wire(wire.dispatcher), 9, instance, member_id)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(join_as, "ib", "")
        await trio.sleep(0.1)  # the follower's join starts the rebalance the leader rejoins
        nursery.start_soon(join_as, "ia", first.member_id)
    leader, follower = answers["ia"], answers["ib"]
    assert leader.leader == leader.member_id and leader.generation_id == follower.generation_id
    assert not leader.skip_assignment  # a real rebalance: the leader assigns
    generation = leader.generation_id

    async def sync_as(instance: str, member_id: str, assignments: dict[str, bytes]) -> None:
        answers[instance] = await sync(Wire(wire.dispatcher), generation, member_id, instance, assignments)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(sync_as, "ib", follower.member_id, {})
        nursery.start_soon(sync_as, "ia", leader.member_id, {leader.member_id: b"A", follower.member_id: b"B"})
    assert (answers["ia"].assignment, answers["ib"].assignment) == (b"A", b"B"), answers
    return leader.member_id, follower.member_id, generation


async def test_a_restarted_static_leader_is_told_to_skip_the_assignment(wire: Wire) -> None:
    leader_id, follower_id, generation = await stable_group_of_two(wire)
    restarted = await static_join(wire, 9, "ia")
    assert restarted.member_id != leader_id
    assert (int(restarted.error_code), restarted.generation_id) == (0, generation)  # no rebalance
    assert restarted.leader == restarted.member_id and restarted.skip_assignment
    assert {(m.member_id, m.group_instance_id, bytes(m.metadata)) for m in restarted.members} == {
        (restarted.member_id, "ia", SUBSCRIPTION),
        (follower_id, "ib", SUBSCRIPTION),
    }
    # it syncs without assigning and gets its partitions back; the follower noticed nothing
    synced = await sync(wire, generation, restarted.member_id, "ia", {})
    assert (int(synced.error_code), synced.assignment) == (0, b"A")
    assert await heartbeat(wire, generation, follower_id, "ib") == 0
    assert await heartbeat(wire, generation, leader_id, "ia") != 0  # the old incarnation is fenced

    # a restarted follower: the leader's id, no members, nothing to skip
    follower = await static_join(wire, 9, "ib")
    assert (follower.generation_id, follower.leader, follower.members) == (generation, restarted.member_id, ())
    assert not follower.skip_assignment
    assert (await sync(wire, generation, follower.member_id, "ib", {})).assignment == b"B"


async def test_before_v9_a_restarted_leader_gets_the_old_leader_id(wire: Wire) -> None:
    leader_id, _, generation = await stable_group_of_two(wire)
    for version in (8, 5):
        restarted = await static_join(wire, version, "ia")
        assert (int(restarted.error_code), restarted.generation_id) == (0, generation)
        assert restarted.leader == leader_id != restarted.member_id and restarted.members == ()
        assert (await sync(wire, generation, restarted.member_id, "ia", {})).assignment == b"A"
        leader_id = restarted.member_id  # the group's leader is now this incarnation
