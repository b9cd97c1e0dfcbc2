"""Consumer-group membership: join, sync, heartbeat, leave, commit (Kafka's ConsumerCoordinator).

A subscribed consumer joins its group (FindCoordinator, JoinGroup, SyncGroup) when ``poll()``
finds that a (re)join is needed; the join runs as a task of the consumer's nursery, so a
``poll()`` that times out does not abort it. The group leader computes the assignment with the
assignor the group chose among ``partition.assignment.strategy`` (assignor plugins, so members
running librdkafka or the Java client can share the group). A heartbeat task keeps the session
alive and notices rebalances; the next ``poll()`` then rejoins.

Rebalance protocol: cooperative (KIP-429) only when *every* configured assignor is cooperative,
as in the Java client; otherwise eager. Eager members revoke everything before JoinGroup;
cooperative members keep consuming during the rebalance, revoke only what moved away, and rejoin
at once when they revoked something so the next generation can hand it out.

Rebalance listener callbacks (``on_partitions_revoked``, ``on_partitions_assigned``,
``on_partitions_lost``; sync or async) run inside the join task. With ``enable.auto.commit`` the
positions are committed from ``poll()`` every ``auto.commit.interval.ms`` (see
:meth:`ConsumerCoordinator.maybe_auto_commit`), before partitions are revoked, and on close.
"""

from __future__ import annotations

import enum
import inspect
import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

import trio

from ..consumer_protocol import (
    PROTOCOL_TYPE,
    Assignment,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from ..errors import ErrorCode, KafkaError
from ..interfaces import Assignor, GroupMember, MemberAssignment, TopicPartition
from ..manager import Plugins
from ..plugin_origin import origin
from ..protocol import ApiKey
from .assignment_check import InvalidAssignment, check_assignment
from .config import ClientConfig
from .connection import BrokerConnection
from .fetcher import Fetcher
from .group_ops import CoordinatorLookup, OffsetAndMetadata, commit_offsets, fetch_committed
from .network import NetworkClient
from .requests import error_code, make_request
from .subscription import SubscriptionState

log = logging.getLogger("odradek.client.consumer")


class RebalanceListener(Protocol):
    """Callbacks around rebalances (methods may be sync or async; all are optional)."""

    def on_partitions_revoked(self, revoked: list[TopicPartition]) -> Any: ...

    def on_partitions_assigned(self, assigned: list[TopicPartition]) -> Any: ...

    def on_partitions_lost(self, lost: list[TopicPartition]) -> Any: ...


class MemberState(enum.Enum):
    UNJOINED = "unjoined"
    REBALANCING = "rebalancing"
    STABLE = "stable"


#: OffsetCommit errors worth retrying, as Java's ConsumerCoordinator sorts them: a coordinator
#: loading, moving or unreachable, and a partition the broker does not know (yet); every other
#: error (generation, rebalance, authorization, metadata size) fails the commit at once
_COMMIT_RETRIABLE = frozenset(
    {
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.REQUEST_TIMED_OUT,
        ErrorCode.NETWORK_EXCEPTION,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    }
)


class CommitFailedError(KafkaError):
    """An offset commit failed for good (Java's CommitFailedException, and the other errors its
    commitSync does not retry): never retried, whatever its code means elsewhere."""

    @property
    def retriable(self) -> bool:
        return False


def _not_a_member(group_id: str, max_poll_interval_ms: int, detail: str) -> str:
    """Java's CommitFailedException explanation: why a subscribed consumer may not commit."""
    return (
        f"commit failed: this consumer is not a member of the current generation of group {group_id!r} "
        f"({detail}). The group may have rebalanced and assigned its partitions to another member; a "
        f"consumer that does not call poll() within max.poll.interval.ms={max_poll_interval_ms} leaves the "
        f"group (processing what one poll returned took too long): raise max.poll.interval.ms or lower "
        f"max.poll.records. The next poll() rejoins"
    )


class FencedInstanceId(KafkaError):
    """Another consumer with the same ``group.instance.id`` joined: this one must stop."""

    code = ErrorCode.FENCED_INSTANCE_ID


async def _call(fn: Any, *args: Any) -> None:
    result = fn(*args)
    if inspect.isawaitable(result):
        await result


class ConsumerCoordinator:
    """Group membership and offset commits for one consumer (see module doc)."""

    def __init__(
        self,
        network: NetworkClient,
        subscriptions: SubscriptionState,
        fetcher: Fetcher,
        config: ClientConfig,
        plugins: Plugins,
    ) -> None:
        self.network = network
        self.subs = subscriptions
        self.fetcher = fetcher
        self.group_id: str = config["group.id"]
        self.group_instance_id: str | None = config["group.instance.id"] or None
        self.session_timeout_ms: int = config["session.timeout.ms"]
        self.rebalance_timeout_ms: int = config["max.poll.interval.ms"]
        self.heartbeat_interval_s = config["heartbeat.interval.ms"] / 1000.0
        self.auto_commit = bool(config["enable.auto.commit"]) and bool(self.group_id)
        self.auto_commit_interval_s = config["auto.commit.interval.ms"] / 1000.0
        self._next_auto_commit = 0.0  # set by the first poll (trio's clock is not running yet)
        self._auto_commit_running = False
        self._auto_committed: dict[TopicPartition, int] = {}
        self.default_timeout_s = config["default.api.timeout.ms"] / 1000.0
        #: how long an automatic commit (before a revocation, on close) retries: the join task
        #: runs it while no heartbeat is sent, so it must end well within session.timeout.ms
        self.auto_commit_timeout_s = min(self.default_timeout_s, self.session_timeout_ms / 2000.0)
        self.exclude_internal = bool(config["exclude.internal.topics"])
        self.plugins = plugins
        self.assignors: list[Assignor] = (
            [plugins.assignor(name) for name in config["partition.assignment.strategy"]] if self.group_id else []
        )
        self.protocol = (
            "cooperative"
            if self.assignors and all(a.rebalance_protocol == "cooperative" for a in self.assignors)
            else "eager"
        )
        self.coordinator = CoordinatorLookup(network, self.group_id)
        self.listener: Any = None
        self.state = MemberState.UNJOINED
        self.member_id = ""
        self.generation = -1
        self.protocol_name: str | None = None
        self.owned: list[TopicPartition] = []
        self.rejoin_needed = True
        self._joined_topics: dict[str, int] = {}
        self._join_task_running = False
        self._join_scope: trio.CancelScope | None = None
        self._join_done = trio.Event()
        self._join_done.set()
        self._join_error: BaseException | None = None
        self._wakeup_heartbeat = trio.Event()
        self.last_poll = 0.0
        self._fatal: BaseException | None = None

    # -- state -------------------------------------------------------------------------------------
    @property
    def active(self) -> bool:
        return self.state is MemberState.STABLE and not self.rejoin_needed

    def check_fatal(self) -> None:
        if self._fatal is not None:
            raise self._fatal

    def subscription_changed(self) -> bool:
        """Whether the topics (or their partition counts) behind the subscription changed since
        the last join: pattern matches appearing, partitions added."""
        return self.current_topics() != self._joined_topics

    def current_topics(self) -> dict[str, int]:
        cluster = self.network.cluster
        if self.subs.pattern is not None:
            return {
                name: info.num_partitions
                for name, info in cluster.topics.items()
                if self.subs.matches(name)
                and info.error is ErrorCode.NONE
                and not (info.is_internal and self.exclude_internal)
            }
        return {t: cluster.partitions_for(t) for t in self.subs.topics}

    # -- joining -----------------------------------------------------------------------------------
    def start_join(self, nursery: trio.Nursery) -> trio.Event:
        """Start a (re)join task unless one runs; returns the event set when it finishes."""
        if not self._join_task_running:
            self._join_task_running = True
            self._join_done = trio.Event()
            self._join_error = None
            self._join_scope = trio.CancelScope()  # entered by the task; abort_join may cancel it first
            nursery.start_soon(self._join_task)
        return self._join_done

    async def _join_task(self) -> None:
        assert self._join_scope is not None
        try:
            with self._join_scope:
                await self._join()
        except (KafkaError, trio.TooSlowError) as exc:  # reported by the next poll()
            self._join_error = exc
            if isinstance(exc, FencedInstanceId):
                self._fatal = exc
        finally:
            self._join_scope = None
            self._join_task_running = False
            self._join_done.set()

    @property
    def join_running(self) -> bool:
        """Whether a (re)join task is under way."""
        return self._join_task_running

    async def wait_join_done(self) -> None:
        """Until the join task under way (if any) has ended."""
        await self._join_done.wait()

    async def abort_join(self) -> None:
        """Stop a join under way and wait until its task ended (close(): a leaving member does
        not finish the rebalance)."""
        if self._join_task_running:
            if self._join_scope is not None:
                self._join_scope.cancel()
            await self._join_done.wait()

    def take_join_error(self) -> None:
        error, self._join_error = self._join_error, None
        if error is not None:
            raise error

    async def _join(self) -> None:
        if self.owned and self.generation < 0:
            # our membership was lost (session timeout, fenced generation): partitions are gone
            lost, self.owned = list(self.owned), []
            for tp in lost:
                self.fetcher.discard(tp)
            self.subs.set_assignment(())
            await self._listener("on_partitions_lost", lost, fallback="on_partitions_revoked")
        elif self.owned and self.protocol == "eager":
            await self._revoke(list(self.owned))
        self.state = MemberState.REBALANCING
        attempt = 0
        while True:
            self.rejoin_needed = False
            try:
                await self._join_and_sync()
                return
            except KafkaError as exc:
                code = exc.code
                if code in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION):
                    self.member_id = "" if code is ErrorCode.UNKNOWN_MEMBER_ID else self.member_id
                    self.generation = -1
                elif code is ErrorCode.FENCED_INSTANCE_ID:
                    self.state = MemberState.UNJOINED
                    raise FencedInstanceId(str(exc)) from exc
                elif code is ErrorCode.MEMBER_ID_REQUIRED or code is ErrorCode.REBALANCE_IN_PROGRESS:
                    pass  # rejoin at once (the member id was recorded)
                elif not exc.retriable:
                    self.state = MemberState.UNJOINED
                    raise
                self.coordinator.check(code)
                self.rejoin_needed = True
                if code not in (ErrorCode.MEMBER_ID_REQUIRED, ErrorCode.REBALANCE_IN_PROGRESS):
                    await trio.sleep(self.network.retry_backoff.seconds(attempt))
                    attempt += 1

    def _subscription_for(self, assignor: Assignor, topics: list[str]) -> bytes:
        owned = list(self.owned) if self.protocol == "cooperative" else []
        user_data = assignor.subscription_user_data(topics, owned, self.generation)
        return encode_subscription(
            Subscription(topics, user_data, tuple(owned), self.generation if self.protocol == "cooperative" else -1)
        )

    async def _join_and_sync(self) -> None:
        if self.subs.pattern is not None:
            await self.network.refresh_metadata(all_topics=True)
        else:
            self.network.add_topics(self.subs.topics)
            await self.network.refresh_metadata(self.subs.topics)
        self._joined_topics = self.current_topics()
        topics = sorted(self._joined_topics)
        protocols = [{"name": a.name, "metadata": self._subscription_for(a, topics)} for a in self.assignors]

        def build_join(conn: BrokerConnection) -> Any:
            version = conn.version(ApiKey.JOIN_GROUP, max_version=9)
            if self.group_instance_id is not None and version < 5:
                raise KafkaError("the coordinator does not support static membership (JoinGroup v5)")
            return make_request(
                ApiKey.JOIN_GROUP,
                version,
                group_id=self.group_id,
                session_timeout=self.session_timeout_ms,
                rebalance_timeout=self.rebalance_timeout_ms,
                member_id=self.member_id,
                group_instance_id=self.group_instance_id,
                protocol_type=PROTOCOL_TYPE,
                protocols=protocols,
                reason=None,
            )

        join_timeout = (self.rebalance_timeout_ms + 5000) / 1000.0
        response = await self.coordinator.send(build_join, timeout_s=join_timeout)
        code = error_code(response.error_code)
        if code is ErrorCode.MEMBER_ID_REQUIRED:
            self.member_id = response.member_id
        if code is not ErrorCode.NONE:
            raise KafkaError(f"JoinGroup for {self.group_id!r} failed with {code.name}", code=code)
        self.member_id = response.member_id
        self.generation = int(response.generation_id)
        self.protocol_name = response.protocol_name
        assignor = next((a for a in self.assignors if a.name == self.protocol_name), None)
        if assignor is None:
            raise KafkaError(f"the group chose assignor {self.protocol_name!r}, which this consumer does not have")
        assignments: list[dict[str, Any]] = []
        if response.leader == self.member_id and getattr(response, "skip_assignment", False):
            # KIP-814 (v9): a static leader restarted into a Stable group keeps the group's
            # assignment; SyncGroup hands it its own part back
            log.info("group %s generation %d: leader rejoined, assignment skipped", self.group_id, self.generation)
        elif response.leader == self.member_id:
            assignments = await self._lead(assignor, response.members)

        def build_sync(conn: BrokerConnection) -> Any:
            version = conn.version(ApiKey.SYNC_GROUP, max_version=5)
            return make_request(
                ApiKey.SYNC_GROUP,
                version,
                group_id=self.group_id,
                generation_id=self.generation,
                member_id=self.member_id,
                group_instance_id=self.group_instance_id,
                protocol_type=PROTOCOL_TYPE,
                protocol_name=self.protocol_name,
                assignments=assignments,
            )

        response = await self.coordinator.send(build_sync, timeout_s=join_timeout)
        code = error_code(response.error_code)
        if code is not ErrorCode.NONE:
            raise KafkaError(f"SyncGroup for {self.group_id!r} failed with {code.name}", code=code)
        assignment = decode_assignment(response.assignment)
        await self._on_assignment(assignor, assignment)

    async def _lead(self, assignor: Assignor, members: Sequence[Any]) -> list[dict[str, Any]]:
        """The leader's part: decode every subscription, assign, encode."""
        group_members: list[GroupMember] = []
        for m in members:
            sub = decode_subscription(m.metadata)
            group_members.append(
                GroupMember(
                    member_id=m.member_id,
                    group_instance_id=getattr(m, "group_instance_id", None),
                    topics=tuple(sub.topics),
                    user_data=sub.user_data,
                    owned_partitions=tuple(sub.owned_partitions),
                    generation=sub.generation_id,
                    rack_id=sub.rack_id,
                )
            )
        all_topics = sorted({t for m in group_members for t in m.topics})
        self.network.add_topics(all_topics)
        await self.network.refresh_metadata(all_topics)
        counts = {t: self.network.cluster.partitions_for(t) for t in all_topics}

        def culprit() -> str:
            plugin = origin(self.plugins, "odradek_register_assignors", assignor.name)
            return f"assignor {assignor.name!r} from {plugin}"

        try:
            raw: object = assignor.assign(counts, group_members)
        except Exception as exc:  # a bug in the plugin: fail this rebalance, naming it
            raise InvalidAssignment(f"{culprit()} raised {exc!r} in assign()") from exc
        result = check_assignment(
            raw, group_members, counts, cooperative=self.protocol == "cooperative", culprit=culprit
        )
        log.info("group %s generation %d: leader assigned %s", self.group_id, self.generation, result)
        return [
            {
                "member_id": m.member_id,
                "assignment": encode_assignment(
                    Assignment(tuple(result[m.member_id].partitions), result[m.member_id].user_data)
                ),
            }
            for m in group_members
        ]

    async def _on_assignment(self, assignor: Assignor, assignment: Assignment) -> None:
        new = list(assignment.partitions)
        assignor.on_assignment(MemberAssignment(tuple(new), assignment.user_data), self.generation)
        self.state = MemberState.STABLE
        self._wakeup_heartbeat.set()
        if self.protocol == "cooperative":
            new_set = set(new)
            revoked = [tp for tp in self.owned if tp not in new_set]
            added = [tp for tp in new if tp not in set(self.owned)]
            if revoked:
                await self._revoke(revoked)
                self.rejoin_needed = True  # let the next generation hand them out
            self.owned = [tp for tp in self.owned if tp in new_set] + added
            self.subs.add(added)
        else:
            added = new
            self.owned = list(new)
            self.subs.set_assignment(new)
        for tp in added:
            self.subs.state(tp).awaiting_committed = True
        log.info("group %s generation %d: assigned %s", self.group_id, self.generation, added)
        await self._listener("on_partitions_assigned", added)

    async def _revoke(self, partitions: list[TopicPartition]) -> None:
        if self.auto_commit:
            wanted = set(partitions)
            positions = {tp: pos for tp, pos in self.subs.positions().items() if tp in wanted}
            await self.commit_consumed(positions, f"before revoking {partitions}")
        await self._listener("on_partitions_revoked", partitions)
        for tp in partitions:
            self.fetcher.discard(tp)
        self.subs.remove(partitions)
        revoked = set(partitions)
        self.owned = [tp for tp in self.owned if tp not in revoked]

    async def _listener(self, name: str, partitions: list[TopicPartition], *, fallback: str | None = None) -> None:
        if self.listener is None:
            return
        fn = getattr(self.listener, name, None)
        if fn is None and fallback is not None:
            fn = getattr(self.listener, fallback, None)
        if fn is None:
            return
        try:
            await _call(fn, list(partitions))
        except Exception:
            log.exception("rebalance listener %s raised", name)

    # -- heartbeats --------------------------------------------------------------------------------
    async def heartbeat_loop(self) -> None:
        """Heartbeat while stable; flag rejoins; leave the group when poll() stalls too long."""
        while True:
            if self.state is not MemberState.STABLE:
                self._wakeup_heartbeat = trio.Event()
                await self._wakeup_heartbeat.wait()
                continue
            await trio.sleep(self.heartbeat_interval_s)
            if self.state is not MemberState.STABLE:
                continue
            if trio.current_time() - self.last_poll > self.rebalance_timeout_ms / 1000.0:
                log.warning(
                    "poll() not called for max.poll.interval.ms=%d: leaving group %s",
                    self.rebalance_timeout_ms,
                    self.group_id,
                )
                await self.leave()
                continue
            try:
                await self._heartbeat()
            except KafkaError as exc:
                self._on_heartbeat_error(exc)

    async def _heartbeat(self) -> None:
        def build(conn: BrokerConnection) -> Any:
            version = conn.version(ApiKey.HEARTBEAT, max_version=4)
            return make_request(
                ApiKey.HEARTBEAT,
                version,
                group_id=self.group_id,
                generation_id=self.generation,
                member_id=self.member_id,
                group_instance_id=self.group_instance_id,
            )

        response = await self.coordinator.send(build)
        code = error_code(response.error_code)
        if code is not ErrorCode.NONE:
            raise KafkaError(f"Heartbeat failed with {code.name}", code=code)

    def _on_heartbeat_error(self, exc: KafkaError) -> None:
        code = exc.code
        self.coordinator.check(code)
        if code is ErrorCode.REBALANCE_IN_PROGRESS:
            self.rejoin_needed = True
        elif code in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION):
            log.info("group %s: membership lost (%s)", self.group_id, code.name)
            if code is ErrorCode.UNKNOWN_MEMBER_ID:
                self.member_id = ""
            self.generation = -1
            self.state = MemberState.UNJOINED
            self.rejoin_needed = True
        elif code is ErrorCode.FENCED_INSTANCE_ID:
            self.state = MemberState.UNJOINED
            self._fatal = FencedInstanceId(f"group.instance.id {self.group_instance_id!r} was fenced")
        elif not exc.retriable:
            log.warning("heartbeat for group %s failed: %s", self.group_id, exc)

    async def leave(self) -> None:
        """LeaveGroup (dynamic members only: a static member's session outlives a restart)."""
        was = self.state
        self.state = MemberState.UNJOINED
        self.rejoin_needed = True
        if was is MemberState.UNJOINED or not self.member_id or self.group_instance_id is not None:
            return

        def build(conn: BrokerConnection) -> Any:
            version = conn.version(ApiKey.LEAVE_GROUP, max_version=4)
            return make_request(
                ApiKey.LEAVE_GROUP,
                version,
                group_id=self.group_id,
                member_id=self.member_id,
                members=[{"member_id": self.member_id, "group_instance_id": None, "reason": None}],
            )

        try:
            await self.coordinator.send(build)
        except KafkaError as exc:
            log.info("LeaveGroup for %s failed: %s", self.group_id, exc)
        self.member_id = ""
        self.generation = -1

    # -- offsets -----------------------------------------------------------------------------------
    async def commit(
        self, offsets: Mapping[TopicPartition, OffsetAndMetadata], *, timeout_s: float | None = None
    ) -> None:
        """Commit ``offsets`` as this member (or as a non-member for manual assignment), retrying
        what Java retries (:data:`_COMMIT_RETRIABLE`) for ``timeout_s`` (default.api.timeout.ms).

        UNKNOWN_TOPIC_OR_PARTITION is retried only while the cluster's metadata still has the
        partition (a topic being created or moved); a partition the metadata does not have (a
        deleted topic, one recreated with fewer partitions) fails the commit at once instead of
        after the whole timeout, as Java's and librdkafka's commits do.
        """
        if not self.group_id:
            raise KafkaError("commit needs a group.id", code=ErrorCode.INVALID_GROUP_ID)
        if self.subs.subscribed and self.state is MemberState.UNJOINED:
            # Java's CommitFailedException; committing as a non-member (generation -1) would
            # succeed in an empty group and overwrite offsets this consumer no longer owns
            raise CommitFailedError(
                _not_a_member(self.group_id, self.rebalance_timeout_ms, "not joined, or left the group"),
                code=ErrorCode.UNKNOWN_MEMBER_ID,
            )
        member = self.subs.subscribed

        async def attempt() -> None:
            try:
                await commit_offsets(
                    self.coordinator,
                    offsets,
                    generation=self.generation if member else -1,
                    member_id=self.member_id if member else "",
                    group_instance_id=self.group_instance_id if member else None,
                )
            except KafkaError as exc:
                if exc.code in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION):
                    detail = f"the coordinator answered {exc.code.name}"
                    message = _not_a_member(self.group_id, self.rebalance_timeout_ms, detail)
                    raise CommitFailedError(message, code=exc.code) from exc
                if exc.code not in _COMMIT_RETRIABLE:
                    raise CommitFailedError(str(exc), code=exc.code) from exc
                if exc.code is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                    await self._check_partitions_exist(offsets, exc)
                raise

        timeout = self.default_timeout_s if timeout_s is None else timeout_s
        try:
            await self.network.call_with_retries(attempt, timeout_s=timeout, what="OffsetCommit")
        except KafkaError as exc:
            if exc.code in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION, ErrorCode.REBALANCE_IN_PROGRESS):
                self.rejoin_needed = True
            raise

    async def _check_partitions_exist(
        self, offsets: Mapping[TopicPartition, OffsetAndMetadata], exc: KafkaError
    ) -> None:
        """Raise CommitFailedError when fresh metadata lacks one of the committed partitions."""
        topics = {tp.topic for tp in offsets}
        try:
            cluster = await self.network.refresh_metadata(topics, allow_auto_create=False)
        except KafkaError:
            return  # no answer: retry the commit as usual
        for tp in offsets:
            info = cluster.topics.get(tp.topic)
            gone = info is None or info.error is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            if gone or (info is not None and info.error is ErrorCode.NONE and tp.partition not in info.partitions):
                raise CommitFailedError(
                    f"OffsetCommit for group {self.group_id!r} failed: topic or partition {tp} does not exist",
                    code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                ) from exc

    async def commit_consumed(self, positions: Mapping[TopicPartition, int], when: str) -> None:
        """The automatic commit of ``enable.auto.commit`` (before a revocation, on close): a
        failure is logged, not raised, since the caller goes on revoking or leaving either way;
        retries end after :attr:`auto_commit_timeout_s` so a rebalance is never held for the
        whole default.api.timeout.ms."""
        if not positions:
            return
        try:
            await self.commit(
                {tp: OffsetAndMetadata(p) for tp, p in positions.items()}, timeout_s=self.auto_commit_timeout_s
            )
        except KafkaError as exc:
            log.warning("group %s: auto-commit %s failed: %s", self.group_id, when, exc)

    async def committed(
        self, partitions: Iterable[TopicPartition], timeout_s: float
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        parts = list(partitions)

        async def attempt() -> dict[TopicPartition, OffsetAndMetadata]:
            return await fetch_committed(self.coordinator, parts)

        return await self.network.call_with_retries(attempt, timeout_s=timeout_s, what="OffsetFetch")

    async def refresh_committed_positions(self, timeout_s: float) -> None:
        """Initialise positions of partitions waiting for their committed offset."""
        waiting = self.subs.needing_committed()
        if not waiting:
            return
        found = await self.committed(waiting, timeout_s)
        for tp in waiting:
            st = self.subs.assignment.get(tp)
            if st is None or not st.awaiting_committed:
                continue
            st.awaiting_committed = False
            committed = found.get(tp)
            if committed is not None:
                st.position = committed.offset
                # the first Fetch checks the committed epoch against the leader's log (KIP-320)
                st.offset_epoch = committed.leader_epoch
            else:
                self.subs.request_reset(tp)
        self.fetcher.wakeup()

    def maybe_auto_commit(self, nursery: trio.Nursery) -> None:
        """``enable.auto.commit`` as Java does it: called by every ``poll()`` before it returns
        anything, and once ``auto.commit.interval.ms`` has passed since the last auto-commit,
        commits the positions in the background -- which are the offsets after the records
        *earlier* polls returned. A record is committed only once the application asked for more,
        so processing finished before the next poll() gives at-least-once delivery (a background
        timer committed records still being processed). Only positions that moved since the last
        auto-commit are sent, so an idle consumer sends nothing; a failed commit is tried again
        after ``retry.backoff.ms``."""
        if not self.auto_commit or self._auto_commit_running:
            return
        now = trio.current_time()
        if now < self._next_auto_commit:
            return
        if self.subs.subscribed and self.state is not MemberState.STABLE:
            return  # the revocation before the rejoin commits (or the partitions are lost)
        self._next_auto_commit = now + self.auto_commit_interval_s
        changed = {tp: p for tp, p in self.subs.positions().items() if self._auto_committed.get(tp) != p}
        if changed:
            self._auto_commit_running = True
            nursery.start_soon(self._auto_commit, changed)

    async def _auto_commit(self, positions: dict[TopicPartition, int]) -> None:
        try:
            await self.commit({tp: OffsetAndMetadata(p) for tp, p in positions.items()})
        except KafkaError as exc:
            log.info("group %s: auto-commit failed: %s", self.group_id, exc)
            self._next_auto_commit = trio.current_time() + self.network.retry_backoff.seconds(0)
        else:
            self._auto_committed.update(positions)
        finally:
            self._auto_commit_running = False
