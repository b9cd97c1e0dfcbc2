"""Requests to a group coordinator that the consumer and the admin client share.

Committed offsets live with the group's coordinator (a broker found with FindCoordinator); these
helpers find it, remember it, and forget it when the broker says NOT_COORDINATOR or the
connection fails, so the next retry looks it up again.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from ..errors import ErrorCode, KafkaError
from ..interfaces import TopicPartition
from ..protocol import ApiKey
from .connection import BrokerConnection, NetworkError
from .network import COORDINATOR_CHANNEL, GROUP_COORDINATOR, NetworkClient
from .requests import RequestBuilder, error_code, make_request, request_builder

_COORDINATOR_ERRORS = frozenset(
    {ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NETWORK_EXCEPTION}
)


class OffsetAndMetadata(NamedTuple):
    """A committed offset: the next offset to read, with optional metadata and leader epoch."""

    offset: int
    metadata: str = ""
    leader_epoch: int = -1


class CoordinatorLookup:
    """The coordinator node of one group, looked up lazily and forgotten on coordinator errors."""

    def __init__(self, network: NetworkClient, group_id: str) -> None:
        self.network = network
        self.group_id = group_id
        self.node: int | None = None

    async def get(self) -> int:
        if self.node is None:
            self.node = await self.network.find_coordinator(self.group_id, GROUP_COORDINATOR)
        return self.node

    def check(self, code: ErrorCode) -> None:
        """Forget the coordinator when ``code`` says it moved or is unreachable."""
        if code in _COORDINATOR_ERRORS:
            self.node = None

    async def send(self, build: RequestBuilder, *, timeout_s: float | None = None) -> Any:
        node = await self.get()
        try:
            # a connection of its own: commits and heartbeats never wait behind a long-poll fetch
            return await self.network.send(node, build, timeout_s=timeout_s, channel=COORDINATOR_CHANNEL)
        except NetworkError:
            self.node = None
            raise


async def fetch_committed(
    coordinator: CoordinatorLookup, partitions: Iterable[TopicPartition] | None
) -> dict[TopicPartition, OffsetAndMetadata]:
    """OffsetFetch: the group's committed offsets (all of them when ``partitions`` is None).
    Partitions without a commit are left out."""
    topics: list[dict[str, Any]] | None = None
    if partitions is not None:
        by_topic: dict[str, list[int]] = {}
        for tp in partitions:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        topics = [{"name": t, "partition_indexes": sorted(ps)} for t, ps in by_topic.items()]
    build = request_builder(
        ApiKey.OFFSET_FETCH,
        min_version=1 if topics is not None else 2,
        max_version=7,
        group_id=coordinator.group_id,
        topics=topics,
        require_stable=False,
    )
    response = await coordinator.send(build)
    top = error_code(getattr(response, "error_code", 0))
    if top is not ErrorCode.NONE:
        coordinator.check(top)
        raise KafkaError(f"OffsetFetch for group {coordinator.group_id!r} failed with {top.name}", code=top)
    out: dict[TopicPartition, OffsetAndMetadata] = {}
    for t in response.topics:
        for p in t.partitions:
            code = error_code(p.error_code)
            if code is not ErrorCode.NONE:
                coordinator.check(code)
                raise KafkaError(f"OffsetFetch for {t.name}-{p.partition_index} failed with {code.name}", code=code)
            offset = int(p.committed_offset)
            if offset >= 0:
                out[TopicPartition(t.name, int(p.partition_index))] = OffsetAndMetadata(
                    offset, p.metadata or "", int(getattr(p, "committed_leader_epoch", -1))
                )
    return out


async def commit_offsets(
    coordinator: CoordinatorLookup,
    offsets: Mapping[TopicPartition, OffsetAndMetadata],
    *,
    generation: int = -1,
    member_id: str = "",
    group_instance_id: str | None = None,
) -> None:
    """OffsetCommit; raises the first partition error (retriable ones can be retried as a whole).

    ``generation`` -1 and an empty ``member_id`` commit as a non-member (manual assignment, admin
    offset resets); the coordinator then requires the group to have no active members.
    """
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for tp, om in offsets.items():
        by_topic.setdefault(tp.topic, []).append(
            {
                "partition_index": tp.partition,
                "committed_offset": om.offset,
                "committed_leader_epoch": om.leader_epoch,
                "committed_metadata": om.metadata,
                "commit_timestamp": -1,
            }
        )

    def build(conn: BrokerConnection) -> Any:
        version = conn.version(ApiKey.OFFSET_COMMIT, min_version=2, max_version=8)
        return make_request(
            ApiKey.OFFSET_COMMIT,
            version,
            group_id=coordinator.group_id,
            generation_id_or_member_epoch=generation,
            generation_id=generation,
            member_id=member_id,
            group_instance_id=group_instance_id,
            retention_time=-1,
            topics=[{"name": t, "partitions": ps} for t, ps in by_topic.items()],
        )

    response = await coordinator.send(build)
    for t in response.topics:
        for p in t.partitions:
            code = error_code(p.error_code)
            if code is not ErrorCode.NONE:
                coordinator.check(code)
                raise KafkaError(
                    f"OffsetCommit of {t.name}-{p.partition_index} for group {coordinator.group_id!r} "
                    f"failed with {code.name}",
                    code=code,
                )
