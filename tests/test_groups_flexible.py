"""The flexible versions of the classic group APIs: JoinGroup v6-v8 (v7's nullable protocol
name, v8's reason), SyncGroup v4-v5 (v5's protocol type and name), Heartbeat v4 and LeaveGroup
v4-v5 (v5's reasons), through the dispatcher against a real GroupCoordinator."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from test_groups_apis import GROUP, SUBSCRIPTION, Wire, build, ms, nested
from test_groups_apis import wire as wire  # the fixture, under its own name

from odradek.errors import ErrorCode
from odradek.protocol import ApiKey


async def _join(wire: Wire, version: int, member_id: str = "", reason: str | None = None) -> Any:
    protocol = nested(ApiKey.JOIN_GROUP, version, "JoinGroupRequestProtocol", name="range", metadata=SUBSCRIPTION)
    request = build(
        ApiKey.JOIN_GROUP, version, group_id=GROUP, session_timeout=ms(10_000), rebalance_timeout=ms(20_000),
        member_id=member_id, group_instance_id=None, protocol_type="consumer", protocols=(protocol,), reason=reason,
    )  # fmt: skip
    return await wire.call(ApiKey.JOIN_GROUP, version, request)


@pytest.mark.parametrize(("join", "sync", "beat", "leave"), [(6, 4, 4, 4), (7, 5, 4, 5), (8, 5, 4, 5)])
async def test_a_member_joins_syncs_beats_and_leaves_at_the_flexible_versions(
    wire: Wire, caplog: pytest.LogCaptureFixture, join: int, sync: int, beat: int, leave: int
) -> None:
    caplog.set_level(logging.INFO, "odradek.broker.group")
    await wire.call(ApiKey.FIND_COORDINATOR, 2, build(ApiKey.FIND_COORDINATOR, 2, key=GROUP, key_type=0))
    first = await _join(wire, join, reason="first join")
    assert int(first.error_code) == ErrorCode.MEMBER_ID_REQUIRED and first.member_id
    if join >= 7:
        assert first.protocol_name is None  # null on an error from v7, "" before
    joined = await _join(wire, join, first.member_id, reason="rebalance failed due to a test")
    assert int(joined.error_code) == 0
    assert (joined.protocol_name, joined.leader, [m.metadata for m in joined.members]) == (
        "range",
        first.member_id,
        [SUBSCRIPTION],
    )
    if join >= 7:
        assert joined.protocol_type == "consumer"
    reasons = [r.getMessage() for r in caplog.records if "client reason" in r.getMessage()]
    assert reasons == (
        [
            f"member (new) joins group {GROUP} (client reason: first join)",
            f"member {first.member_id} joins group {GROUP} (client reason: rebalance failed due to a test)",
        ]
        if join >= 8
        else []
    )
    assignment = nested(ApiKey.SYNC_GROUP, sync, "SyncGroupRequestAssignment", member_id=joined.member_id,
                        assignment=b"\x00\x01")  # fmt: skip
    fields: dict[str, Any] = dict(
        group_id=GROUP, generation_id=joined.generation_id, member_id=joined.member_id, group_instance_id=None,
        assignments=(assignment,), protocol_type="consumer", protocol_name="range",
    )  # fmt: skip
    if sync >= 5:  # v5 names the protocol: another one than the group's is refused
        wrong = await wire.call(
            ApiKey.SYNC_GROUP, sync, build(ApiKey.SYNC_GROUP, sync, **{**fields, "protocol_name": "rr"})
        )
        assert int(wrong.error_code) == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    synced = await wire.call(ApiKey.SYNC_GROUP, sync, build(ApiKey.SYNC_GROUP, sync, **fields))
    assert int(synced.error_code) == 0 and synced.assignment == b"\x00\x01"
    if sync >= 5:
        assert (synced.protocol_type, synced.protocol_name) == ("consumer", "range")
    heartbeat = build(ApiKey.HEARTBEAT, beat, group_id=GROUP, generation_id=joined.generation_id,
                      member_id=joined.member_id, group_instance_id=None)  # fmt: skip
    assert int((await wire.call(ApiKey.HEARTBEAT, beat, heartbeat)).error_code) == 0
    member = nested(ApiKey.LEAVE_GROUP, leave, "MemberIdentity", member_id=joined.member_id, group_instance_id=None,
                    reason="the consumer is being closed")  # fmt: skip
    leaving = build(ApiKey.LEAVE_GROUP, leave, group_id=GROUP, members=(member,))
    left = await wire.call(ApiKey.LEAVE_GROUP, leave, leaving)
    assert int(left.error_code) == 0 and [int(m.error_code) for m in left.members] == [0]
    closing = [m for r in caplog.records if "leaves" in (m := r.getMessage()) and "client reason" in m]
    assert closing == (
        [f"member {joined.member_id} leaves group {GROUP} (client reason: the consumer is being closed)"]
        if leave >= 5
        else []
    )
