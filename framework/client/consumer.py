"""The trio-native consumer: subscribe or assign, then ``poll()`` or iterate.

::

    async with AsyncConsumer({"bootstrap.servers": "localhost:9092", "group.id": "g",
                              "auto.offset.reset": "earliest"}) as consumer:
        consumer.subscribe(["events"])
        async for record in consumer:
            print(record.offset, record.value)

The consumer controls its position (the seeds' pull model): ``seek``, ``seek_to_beginning``,
``seek_to_end`` and ``offsets_for_times`` move it; ``commit`` stores it with the group (or
``enable.auto.commit`` does, from ``poll()``, every ``auto.commit.interval.ms``: only records
earlier polls returned are committed). Fetches run ahead in the
background (:mod:`odradek.client.fetcher`); ``poll()`` decodes at most ``max.poll.records``.
Group membership (:mod:`odradek.client.coordinator`) is driven by ``poll()``: it (re)joins when
needed and waits for the join up to its timeout.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from typing import Any

import trio

from ..config import ConfigError
from ..errors import ErrorCode, KafkaError
from ..interfaces import Connector, TopicPartition
from ..manager import Plugins
from .base import AsyncClient
from .coordinator import ConsumerCoordinator, MemberState, RebalanceListener
from .decoding import ConsumerRecord
from .fetcher import Fetcher, NoOffsetForPartition
from .group_ops import OffsetAndMetadata
from .offsets import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, OffsetAndTimestamp, list_offsets
from .subscription import EARLIEST, LATEST, SubscriptionState


class AsyncConsumer(AsyncClient):
    """Kafka consumer for trio (see module doc). Config keys: :mod:`odradek.client.config`."""

    role = "consumer"

    def __init__(
        self,
        config: Mapping[str, Any] | None = None,
        *,
        plugins: Plugins | None = None,
        connector: Connector | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(config, plugins=plugins, connector=connector, **kwargs)
        c = self.config
        if c["group.instance.id"] and not c["group.id"]:
            raise ConfigError("group.instance.id needs a group.id")
        if c["heartbeat.interval.ms"] >= c["session.timeout.ms"]:
            raise ConfigError("heartbeat.interval.ms must be lower than session.timeout.ms")
        self.group_id: str = c["group.id"]
        self.max_poll_records: int = c["max.poll.records"]
        self.subscriptions = SubscriptionState(c["auto.offset.reset"])
        self.fetcher = Fetcher(self.network, self.subscriptions, c, self.plugins.codecs())
        self.coordinator = ConsumerCoordinator(self.network, self.subscriptions, self.fetcher, c, self.plugins)
        self.network.allow_auto_create = bool(c["allow.auto.create.topics"])

    async def _on_start(self, nursery: trio.Nursery) -> None:
        nursery.start_soon(self.fetcher.run, nursery)
        if self.group_id:
            nursery.start_soon(self.coordinator.heartbeat_loop)

    # -- subscription ----------------------------------------------------------------------------
    def subscribe(
        self,
        topics: Iterable[str] | str | re.Pattern[str] | None = None,
        listener: RebalanceListener | Any = None,
        *,
        pattern: str | re.Pattern[str] | None = None,
    ) -> None:
        """Join the group for ``topics`` (a list) or a regex ``pattern`` (a compiled regex or a
        string starting with ``^``, as Kafka's console tools take it)."""
        self._check_open()
        if not self.group_id:
            raise ConfigError("subscribe() needs a group.id; use assign() without a group")
        if isinstance(topics, re.Pattern) or (isinstance(topics, str) and topics.startswith("^")):
            pattern, topics = topics, None
        elif isinstance(topics, str):
            topics = [topics]
        self.subscriptions.subscribe(topics, pattern)
        if pattern is not None:
            self.network.topics = None  # patterns need every topic's metadata
            self.network.request_update()
        else:
            self.network.add_topics(self.subscriptions.topics)
        self.coordinator.listener = listener
        self.coordinator.rejoin_needed = True

    def assign(self, partitions: Iterable[TopicPartition | tuple[str, int]]) -> None:
        """Read exactly these partitions, without group membership."""
        self._check_open()
        parts = [TopicPartition(*tp) for tp in partitions]
        self.subscriptions.assign(parts)
        self.network.add_topics({tp.topic for tp in parts})
        for tp in parts:
            st = self.subscriptions.state(tp)
            if st.position is None and st.reset is None:
                if self.group_id:
                    st.awaiting_committed = True
                else:
                    self.subscriptions.request_reset(tp)
        self.fetcher.wakeup()

    async def unsubscribe(self) -> None:
        """Leave the group (revoking partitions) or drop the manual assignment."""
        self._check_open()
        if self.subscriptions.subscribed and self.coordinator.owned:
            await self.coordinator._revoke(list(self.coordinator.owned))
            await self.coordinator.leave()
        for tp in list(self.subscriptions.assignment):
            self.fetcher.discard(tp)
        self.subscriptions.unsubscribe()

    def assignment(self) -> set[TopicPartition]:
        return set(self.subscriptions.assignment)

    def subscription(self) -> set[str]:
        return set(self.subscriptions.topics)

    # -- polling -----------------------------------------------------------------------------------
    async def poll(
        self, timeout: float = 0.0, max_records: int | None = None
    ) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Records fetched since the last poll (at most ``max.poll.records``), waiting up to
        ``timeout`` seconds for some; an empty dict when none came."""
        self._check_open()
        deadline = trio.current_time() + timeout
        limit = max_records or self.max_poll_records
        self.coordinator.last_poll = trio.current_time()
        assert self._nursery is not None
        # before anything is returned: what earlier polls returned is processed (at-least-once)
        self.coordinator.maybe_auto_commit(self._nursery)
        while True:
            self.coordinator.check_fatal()
            self.fetcher.raise_errors()
            if self.subscriptions.subscribed:
                await self._ensure_group(deadline)
            if self.subscriptions.assignment:
                await self._update_positions(deadline)
                self._raise_missing_offsets()
                self.fetcher.raise_truncations()
            records = self.fetcher.drain(limit)
            if records:
                return records
            if trio.current_time() >= deadline:
                return {}
            with trio.move_on_at(deadline):
                await self._wait_for_data()

    async def _wait_for_data(self) -> None:
        """Until fetched data, a needed rejoin, or a fetch error (checked by the poll loop)."""
        data = self.fetcher.data_ready
        coordinator = self.coordinator
        if self.subscriptions.subscribed and (coordinator.rejoin_needed or coordinator.subscription_changed()):
            if not coordinator.join_running:
                return  # the poll loop starts the join
            # a cooperative member keeps fetching while its join runs (it does not wait for it in
            # _ensure_group): wait for data or the join's end. Returning at once made poll() spin
            # without a checkpoint until its timeout, so in a caller that does not yield between
            # polls the join task never ran and the group never finished rebalancing.
            with trio.move_on_after(coordinator.heartbeat_interval_s):
                async with trio.open_nursery() as either:

                    async def until(wait: Callable[[], Awaitable[object]]) -> None:
                        await wait()
                        either.cancel_scope.cancel()

                    either.start_soon(until, data.wait)
                    either.start_soon(until, coordinator.wait_join_done)
            return
        with trio.move_on_after(coordinator.heartbeat_interval_s if self.group_id else float("inf")):
            await data.wait()

    async def _ensure_group(self, deadline: float) -> None:
        coordinator = self.coordinator
        if coordinator.state is MemberState.STABLE and coordinator.subscription_changed():
            coordinator.rejoin_needed = True
        if coordinator.rejoin_needed or coordinator.state is not MemberState.STABLE:
            assert self._nursery is not None
            # a join that failed since the last poll: a cooperative member that owns partitions
            # does not wait for its joins, and starting the next one would drop the error (an
            # assignor's InvalidAssignment was retried for ever instead of raised)
            coordinator.take_join_error()
            done = coordinator.start_join(self._nursery)
            if coordinator.protocol == "eager" or not coordinator.owned:
                with trio.move_on_at(deadline):
                    await done.wait()
            if done.is_set():
                coordinator.take_join_error()

    async def _update_positions(self, deadline: float) -> None:
        if self.subscriptions.needing_committed():
            timeout = max(deadline - trio.current_time(), 0.0) + self.coordinator.default_timeout_s
            await self.coordinator.refresh_committed_positions(timeout)
        if self.subscriptions.needing_reset():
            self.fetcher.wakeup()

    def _raise_missing_offsets(self, only: list[TopicPartition] | None = None) -> None:
        """Java's NoOffsetForPartitionException, raised by every poll() (and position()) while a
        partition has neither a committed offset nor a reset strategy, until the user seeks it:
        raising once and then returning nothing would stall the partition silently."""
        missing = [tp for tp in self.subscriptions.missing_offsets() if only is None or tp in only]
        if missing:
            names = ", ".join(map(str, missing))
            raise NoOffsetForPartition(f"undefined offset with no reset policy (auto.offset.reset=none) for {names}")

    def __aiter__(self) -> AsyncIterator[ConsumerRecord]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[ConsumerRecord]:
        while True:
            batch = await self.poll(timeout=1.0)
            for records in batch.values():
                for record in records:
                    yield record

    # -- positions ---------------------------------------------------------------------------------
    def seek(self, partition: TopicPartition | tuple[str, int], offset: int) -> None:
        """Make the next poll return ``partition`` from ``offset`` (>= 0, as Java's seek demands;
        seek_to_beginning / seek_to_end / offsets_for_times for the log's edges and times)."""
        if offset < 0:
            raise ValueError(f"seek offset must be >= 0, not {offset}")
        tp = TopicPartition(*partition)
        self.subscriptions.seek(tp, offset)
        self.fetcher.discard(tp)
        self.fetcher.wakeup()

    def seek_to_beginning(self, partitions: Iterable[TopicPartition | tuple[str, int]] | None = None) -> None:
        self._reset(partitions, EARLIEST)

    def seek_to_end(self, partitions: Iterable[TopicPartition | tuple[str, int]] | None = None) -> None:
        self._reset(partitions, LATEST)

    def _reset(self, partitions: Iterable[TopicPartition | tuple[str, int]] | None, strategy: str) -> None:
        parts = (
            [TopicPartition(*tp) for tp in partitions]
            if partitions is not None
            else list(self.subscriptions.assignment)
        )
        for tp in parts:
            self.subscriptions.request_reset(tp, strategy)
            self.fetcher.discard(tp)
        self.fetcher.wakeup()

    async def position(self, partition: TopicPartition | tuple[str, int], timeout: float | None = None) -> int:
        """The offset of the next record ``poll()`` returns for ``partition`` (resolving it now
        from the committed offset or ``auto.offset.reset`` if still unknown)."""
        self._check_open()
        tp = TopicPartition(*partition)
        st = self.subscriptions.state(tp)
        with self._api_deadline(timeout, f"position of {tp}"):
            while st.position is None:
                if st.awaiting_committed:
                    await self.coordinator.refresh_committed_positions(self._default_timeout(timeout))
                    continue
                self._raise_missing_offsets([tp])
                self.fetcher.wakeup()
                await trio.sleep(0.005)
                st = self.subscriptions.state(tp)
        return st.position

    async def committed(
        self, partitions: Iterable[TopicPartition | tuple[str, int]], timeout: float | None = None
    ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """The group's committed offsets (None for partitions without one)."""
        self._check_open()
        self._require_group("committed()")
        parts = [TopicPartition(*tp) for tp in partitions]
        found = await self.coordinator.committed(parts, self._default_timeout(timeout))
        return {tp: found.get(tp) for tp in parts}

    async def offsets_for_times(
        self, timestamps: Mapping[TopicPartition | tuple[str, int], int], timeout: float | None = None
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """Earliest offset whose timestamp is >= the given one, per partition (None: no such record)."""
        self._check_open()
        wanted = {TopicPartition(*tp): ts for tp, ts in timestamps.items()}
        if any(ts < 0 for ts in wanted.values()):
            raise ValueError("offsets_for_times needs timestamps >= 0 (ms since the epoch)")
        found = await list_offsets(
            self.network, wanted, isolation_level=self.fetcher.isolation_level, timeout_s=self._default_timeout(timeout)
        )
        return {tp: (found[tp] if found[tp].offset >= 0 else None) for tp in wanted}

    async def beginning_offsets(
        self, partitions: Iterable[TopicPartition | tuple[str, int]], timeout: float | None = None
    ) -> dict[TopicPartition, int]:
        return await self._edge_offsets(partitions, EARLIEST_TIMESTAMP, timeout)

    async def end_offsets(
        self, partitions: Iterable[TopicPartition | tuple[str, int]], timeout: float | None = None
    ) -> dict[TopicPartition, int]:
        return await self._edge_offsets(partitions, LATEST_TIMESTAMP, timeout)

    async def _edge_offsets(
        self, partitions: Iterable[TopicPartition | tuple[str, int]], which: int, timeout: float | None
    ) -> dict[TopicPartition, int]:
        self._check_open()
        wanted = {TopicPartition(*tp): which for tp in partitions}
        found = await list_offsets(
            self.network, wanted, isolation_level=self.fetcher.isolation_level, timeout_s=self._default_timeout(timeout)
        )
        return {tp: r.offset for tp, r in found.items()}

    def pause(self, partitions: Iterable[TopicPartition | tuple[str, int]]) -> None:
        """Stop returning (and fetching) these partitions until resumed; positions are kept."""
        for p in partitions:
            tp = TopicPartition(*p)
            self.subscriptions.state(tp).paused = True
            self.fetcher.discard(tp)

    def resume(self, partitions: Iterable[TopicPartition | tuple[str, int]]) -> None:
        for p in partitions:
            self.subscriptions.state(TopicPartition(*p)).paused = False
        self.fetcher.wakeup()

    def paused(self) -> set[TopicPartition]:
        return {tp for tp, st in self.subscriptions.assignment.items() if st.paused}

    async def partitions_for(self, topic: str, timeout: float | None = None) -> list[int]:
        self._check_open()
        self.network.add_topics([topic])
        with self._api_deadline(timeout, f"partitions of topic {topic!r}"):
            while self.network.cluster.partitions_for(topic) == 0:
                await self.network.refresh_metadata([topic])
                if self.network.cluster.partitions_for(topic) == 0:
                    info = self.network.cluster.topics.get(topic)
                    if info is not None and not info.error.retriable:
                        raise KafkaError(f"topic {topic!r}: {info.error.name}", code=info.error)
                    await trio.sleep(self.network.retry_backoff.seconds(0))
        return list(self.network.cluster.topics[topic].partitions)

    async def list_topics(self) -> dict[str, int]:
        """Every topic and its partition count."""
        self._check_open()
        cluster = await self.network.refresh_metadata(all_topics=True)
        return {name: info.num_partitions for name, info in cluster.topics.items() if info.error is ErrorCode.NONE}

    # -- commits -----------------------------------------------------------------------------------
    async def commit(
        self, offsets: Mapping[TopicPartition | tuple[str, int], int | OffsetAndMetadata] | None = None
    ) -> None:
        """Commit ``offsets`` (the next offsets to read), or the positions of every assigned
        partition (what the last polls returned); waits for the coordinator's answer."""
        self._check_open()
        self._require_group("commit()")
        if offsets is None:
            to_commit = {tp: OffsetAndMetadata(pos) for tp, pos in self.subscriptions.positions().items()}
        else:
            to_commit = {
                TopicPartition(*tp): v if isinstance(v, OffsetAndMetadata) else OffsetAndMetadata(int(v))
                for tp, v in offsets.items()
            }
        if to_commit:
            await self.coordinator.commit(to_commit)

    def _require_group(self, call: str) -> None:
        """Offsets belong to a group: without ``group.id`` these calls fail at once, as Kafka's
        consumer raises InvalidGroupIdException, rather than committing nothing silently."""
        if not self.group_id:
            raise KafkaError(f"{call} needs a group.id (offsets are stored per group)", code=ErrorCode.INVALID_GROUP_ID)

    def commit_async(
        self,
        offsets: Mapping[TopicPartition | tuple[str, int], int | OffsetAndMetadata] | None = None,
        callback: Any = None,
    ) -> None:
        """Commit in the background; ``callback(offsets, exception)`` runs when it is done."""
        self._check_open()
        self._require_group("commit_async()")
        assert self._nursery is not None
        snapshot: dict[TopicPartition | tuple[str, int], int | OffsetAndMetadata] = (
            dict(offsets)
            if offsets is not None
            else {tp: OffsetAndMetadata(p) for tp, p in self.subscriptions.positions().items()}
        )

        async def run() -> None:
            error: BaseException | None = None
            try:
                await self.commit(snapshot)
            except KafkaError as exc:
                error = exc
            if callback is not None:
                callback(snapshot, error)

        self._nursery.start_soon(run)

    # -- close -------------------------------------------------------------------------------------
    async def _on_close(self, timeout: float | None) -> None:
        """Java's close(): commit what was consumed (with ``enable.auto.commit``), revoke, leave.

        Runs after the client is marked closed, so it calls the coordinator directly (the public
        ``commit()`` refuses a closed client). A join under way is stopped first: the member leaves
        instead of completing a rebalance it would abandon, and its owned partitions (kept during a
        cooperative rebalance) are committed and revoked as in a stable group -- the generation is
        still valid while the group prepares the rebalance. Commit failures are logged by the
        coordinator and never skip the LeaveGroup, so the group hands the partitions over at once
        instead of after ``session.timeout.ms``.
        """
        if self._nursery is None or timeout == 0:
            return
        with trio.move_on_after(self._default_timeout(timeout)):
            coordinator = self.coordinator
            await coordinator.abort_join()
            if self.subscriptions.subscribed and coordinator.owned and coordinator.generation >= 0:
                await coordinator._revoke(list(coordinator.owned))
            elif coordinator.auto_commit:
                await coordinator.commit_consumed(self.subscriptions.positions(), "on close")
            if self.group_id:
                await coordinator.leave()
