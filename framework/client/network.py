"""The client's view of the network: bootstrap, metadata, one connection per broker, retries.

:class:`NetworkClient` is shared by the producer, consumer and admin (each client object owns
one). It bootstraps from ``bootstrap.servers``, keeps a :class:`ClusterSnapshot` fresh (every
``metadata.max.age.ms``, and soon after anyone reports a stale leader), opens at most one
connection per broker and channel through the transport plugin's connector, and offers
``send(node, ...)`` where the request is built *after* the connection is known, so it uses the
version negotiated with that broker.

Channels: a broker answers the requests of one connection in order, so a request queued behind
a long-poll Fetch waits up to ``fetch.max.wait.ms``, and one behind a JoinGroup up to the
rebalance. Like the Java client, which gives the group coordinator a connection of its own, the
consumer's fetches (:data:`FETCH_CHANNEL`) and the group coordinator's requests
(:data:`COORDINATOR_CHANNEL`) each use their own connection to a broker; everything else
(metadata, ListOffsets, produce, admin requests) shares the default one.

Retry policy (Java's, KIP-580): exponential backoff from ``retry.backoff.ms`` doubling up to
``retry.backoff.max.ms`` with +/-20% jitter, retriable error codes and network errors only.
"""

from __future__ import annotations

import logging
import math
import random
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, TypeVar

import trio

from ..errors import ErrorCode, KafkaError
from ..interfaces import Connector, TopicPartition, TransportFactory
from ..manager import PluginError, Plugins, default_plugins
from ..protocol import ApiKey
from .cluster import BrokerInfo, ClusterSnapshot, changed_topic_ids, snapshot_from_metadata
from .config import ClientConfig
from .connection import BrokerConnection, NetworkError
from .requests import error_code, make_request, request_builder

log = logging.getLogger("odradek.client")

T = TypeVar("T")

#: FindCoordinator key types
GROUP_COORDINATOR = 0
TRANSACTION_COORDINATOR = 1

#: connections to one broker, by what they carry (see module doc)
DEFAULT_CHANNEL = ""
FETCH_CHANNEL = "fetch"
COORDINATOR_CHANNEL = "coordinator"


class Backoff:
    """Exponential backoff with jitter (KIP-580): ``base * 2**attempt`` capped, +/-20%."""

    def __init__(self, base_ms: int, max_ms: int) -> None:
        self.base_ms = base_ms
        self.max_ms = max(max_ms, base_ms)

    def seconds(self, attempt: int) -> float:
        if self.base_ms == 0:
            return 0.0
        exp = min(self.base_ms * 2.0 ** min(attempt, 30), self.max_ms)  # float power: int ** int is Any to mypy
        return exp * random.uniform(0.8, 1.2) / 1000.0


def is_retriable(exc: BaseException) -> bool:
    """Whether ``exc`` is worth retrying: network failures and Kafka's retriable codes."""
    return isinstance(exc, KafkaError) and exc.retriable


#: connect failures that mean "these credentials will not do" (SASL)
_AUTHENTICATION_CODES = frozenset(
    {ErrorCode.SASL_AUTHENTICATION_FAILED, ErrorCode.UNSUPPORTED_SASL_MECHANISM, ErrorCode.ILLEGAL_SASL_STATE}
)


class NetworkClient:
    """Connections and metadata for one client object (see module doc).

    Use inside a nursery: :meth:`start` launches the metadata task; :meth:`aclose` closes every
    connection. All methods run in the client's trio thread.
    """

    def _transport(self) -> TransportFactory:
        """The transport plugin whose connector reaches the brokers: the one named by
        ``transport`` when set, else the one declaring ``security.protocol`` (as the broker picks
        its listeners' transports), so a third-party transport is used by naming it or by the
        security protocol it declares in its ``TransportFactory``."""
        name: str = self.config["transport"]
        if name:
            return self.plugins.transport(name)
        protocol: str = self.config["security.protocol"]
        try:
            return self.plugins.transport_for(protocol)
        except PluginError as exc:
            names = ", ".join(sorted(t.name for t in self.plugins.transports())) or "none"
            raise PluginError(
                f"{exc} (loaded transports: {names}); set 'transport' to one of them, or install a "
                f"transport plugin that declares {protocol!r} in its security_protocols"
            ) from None

    def __init__(self, config: ClientConfig, plugins: Plugins | None = None, *, connector: Connector | None = None):
        self.config = config
        self.plugins = plugins or default_plugins()
        self.client_id: str = config["client.id"]
        self.connector: Connector = connector or self._transport().connector(config.as_strings())
        self.request_timeout_s = config["request.timeout.ms"] / 1000.0
        self.connect_timeout_s = config["socket.connection.setup.timeout.ms"] / 1000.0
        self.retry_backoff = Backoff(config["retry.backoff.ms"], config["retry.backoff.max.ms"])
        self.reconnect_backoff = Backoff(config["reconnect.backoff.ms"], config["reconnect.backoff.max.ms"])
        self.bootstrap = config.bootstrap_addresses()
        self.cluster = ClusterSnapshot()
        #: the last topic id seen for each topic name (KIP-516), kept when a topic vanishes from
        #: Metadata, so that one created again under its name is noticed by its new id
        self.topic_ids: dict[str, uuid.UUID] = {}
        self.metadata_version = 0
        self._metadata_event = trio.Event()  # set (and replaced) on every metadata update
        #: the last refusal of this client's SASL credentials by a broker, None when none
        self.authentication_error: KafkaError | None = None
        self._wakeup_metadata = trio.Event()
        self._need_update = False
        self._last_refresh = -math.inf
        self._refresh_lock = trio.Lock()
        #: topics whose metadata is kept; None: every topic (pattern subscriptions, admin)
        self.topics: set[str] | None = set()
        self.allow_auto_create = False
        #: open connections by (node id, channel)
        self._connections: dict[tuple[int, str], BrokerConnection] = {}
        self._connecting: dict[tuple[int, str], trio.Event] = {}
        #: called after every metadata update (the sender and the fetcher look for new leaders)
        self.metadata_listeners: list[Callable[[], None]] = []
        #: called after every connect attempt, whoever made it (the producer's sender wakes up)
        self.connect_listeners: list[Callable[[], None]] = []
        self._failures: dict[int, tuple[int, float]] = {}  # node -> (consecutive failures, retry-at)
        self._nursery: trio.Nursery | None = None
        self._closed = False

    # -- lifecycle -------------------------------------------------------------------------------
    def start(self, nursery: trio.Nursery) -> None:
        self._nursery = nursery
        nursery.start_soon(self._metadata_loop)

    async def aclose(self) -> None:
        self._closed = True
        conns, self._connections = list(self._connections.values()), {}
        for conn in conns:
            await conn.close()

    # -- connections -----------------------------------------------------------------------------
    def _address(self, node_id: int) -> tuple[str, int]:
        broker = self.cluster.brokers.get(node_id)
        if broker is not None:
            return broker.host, broker.port
        if node_id < 0 and -node_id - 1 < len(self.bootstrap):
            return self.bootstrap[-node_id - 1]
        raise NetworkError(f"broker {node_id} is not in the cluster metadata")

    async def connection(self, node_id: int, channel: str = DEFAULT_CHANNEL) -> BrokerConnection:
        """The open connection to ``node_id`` for ``channel``, connecting if needed (concurrent
        callers share one)."""
        key = (node_id, channel)
        while True:
            conn = self._connections.get(key)
            if conn is not None and not conn.closed:
                return conn
            if self._closed or self._nursery is None:
                raise NetworkError("client is closed")
            pending = self._connecting.get(key)
            if pending is None:
                break
            await pending.wait()
            if key not in self._connections:  # the other attempt failed: report it too
                raise NetworkError(f"cannot connect to broker {node_id}")
        event = self._connecting[key] = trio.Event()
        try:
            host, port = self._address(node_id)
            conn = await BrokerConnection.open(
                self._nursery,
                self.connector,
                node_id,
                host,
                port,
                client_id=self.client_id,
                connect_timeout_s=self.connect_timeout_s,
                request_timeout_s=self.request_timeout_s,
            )
        except NetworkError as exc:
            if exc.code in _AUTHENTICATION_CODES:
                # not retriable: a call waiting for metadata fails with it (as the Java client's
                # AuthenticationException) instead of timing out with no reason given
                self.authentication_error = exc
                event, self._metadata_event = self._metadata_event, trio.Event()
                event.set()  # wake the waiters for metadata: they fail with it now
            failures = self._failures.get(node_id, (0, 0.0))[0] + 1
            self._failures[node_id] = (failures, trio.current_time() + self.reconnect_backoff.seconds(failures - 1))
            raise
        else:
            self._failures.pop(node_id, None)
            self._connections[key] = conn
            return conn
        finally:
            del self._connecting[key]
            event.set()
            for listener in self.connect_listeners:
                listener()

    def connection_nowait(self, node_id: int) -> BrokerConnection | None:
        """The open connection to ``node_id``, or None after starting to connect in the background
        (unless a connect is already under way or the node is in reconnect backoff)."""
        conn = self._connections.get((node_id, DEFAULT_CHANNEL))
        if conn is not None and not conn.closed:
            return conn
        if (node_id, DEFAULT_CHANNEL) in self._connecting or self._nursery is None or self._closed:
            return None
        _failures, retry_at = self._failures.get(node_id, (0, 0.0))
        if retry_at > trio.current_time():
            return None
        self._nursery.start_soon(self._connect_quietly, node_id)
        return None

    async def _connect_quietly(self, node_id: int) -> None:
        try:
            await self.connection(node_id)
        except NetworkError as exc:
            log.debug("connect to broker %d failed: %r", node_id, exc)
            self.request_update()

    def _candidates(self) -> list[int]:
        """Nodes to ask cluster-wide questions, best first: connected and idle, then known brokers
        not in reconnect backoff, then the bootstrap servers."""
        now = trio.current_time()
        known = list(self.cluster.brokers) or [-i - 1 for i in range(len(self.bootstrap))]
        random.shuffle(known)

        def rank(node: int) -> tuple[int, int]:
            conn = self._connections.get((node, DEFAULT_CHANNEL))
            if conn is not None and not conn.closed:
                return (0, conn.in_flight)
            failures, retry_at = self._failures.get(node, (0, 0.0))
            return (1 if retry_at <= now else 2, failures)

        ordered = sorted(known, key=rank)
        if self.cluster.brokers:  # fall back on bootstrap addresses when every broker is down
            ordered += [-i - 1 for i in range(len(self.bootstrap))]
        return ordered

    async def send(
        self,
        node_id: int,
        build: Callable[[BrokerConnection], Any],
        *,
        timeout_s: float | None = None,
        expect_response: bool = True,
        channel: str = DEFAULT_CHANNEL,
    ) -> Any:
        """Build a request for ``node_id``'s connection on ``channel`` (``build(conn)`` picks the
        version) and send it; raises NetworkError (retriable) when the broker cannot be reached."""
        conn = await self.connection(node_id, channel)
        request = build(conn)
        timeout = self.request_timeout_s if timeout_s is None else timeout_s
        return await conn.request(request, timeout_s=timeout, expect_response=expect_response)

    async def send_any(self, build: Callable[[BrokerConnection], Any], *, timeout_s: float | None = None) -> Any:
        """Send to the least loaded reachable broker, trying the next one on network errors."""
        last: BaseException | None = None
        for node in self._candidates():
            try:
                return await self.send(node, build, timeout_s=timeout_s)
            except NetworkError as exc:
                last = exc
        raise last or NetworkError("no broker is reachable (bootstrap.servers is empty?)")

    async def call_with_retries(
        self, fn: Callable[[], Awaitable[T]], *, timeout_s: float, what: str, on_retry: Callable[[], None] | None = None
    ) -> T:
        """Run ``fn`` until it succeeds, retrying retriable errors with backoff until ``timeout_s``."""
        deadline = trio.current_time() + timeout_s
        attempt = 0
        while True:
            try:
                return await fn()
            except KafkaError as exc:
                if not is_retriable(exc):
                    raise
                delay = self.retry_backoff.seconds(attempt)
                if trio.current_time() + delay >= deadline:
                    raise KafkaError(
                        f"{what} timed out after {timeout_s:.1f}s; last error: {exc}", code=exc.code
                    ) from exc
                log.debug("%s: retrying after %r", what, exc)
                if exc.code in (
                    ErrorCode.NOT_LEADER_OR_FOLLOWER,
                    ErrorCode.LEADER_NOT_AVAILABLE,
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                ):
                    self.request_update()
                if on_retry is not None:
                    on_retry()
                attempt += 1
                await trio.sleep(delay)

    # -- metadata --------------------------------------------------------------------------------
    def add_topics(self, topics: Iterable[str]) -> bool:
        """Track ``topics``' metadata; True (and an update requested) if any was new."""
        if self.topics is None:
            return False
        new = set(topics) - self.topics
        if new:
            self.topics |= new
            self.request_update()
        return bool(new)

    def request_update(self) -> None:
        """Ask the metadata task for a refresh soon (after ``retry.backoff.ms`` since the last)."""
        self._need_update = True
        self._wakeup_metadata.set()

    async def wait_for_update(self, since_version: int, deadline: float) -> bool:
        """Wait until metadata newer than ``since_version`` arrives; False at ``deadline``.
        Raises the broker's refusal of this client's SASL credentials, once there is one."""
        while self.metadata_version <= since_version:
            if self.authentication_error is not None:
                raise self.authentication_error  # no metadata will come with these credentials
            self.request_update()
            with trio.move_on_at(deadline):
                await self._metadata_event.wait()
            if trio.current_time() >= deadline:
                return self.metadata_version > since_version
        return True

    async def refresh_metadata(
        self, topics: Iterable[str] | None = None, *, all_topics: bool = False, allow_auto_create: bool | None = None
    ) -> ClusterSnapshot:
        """Fetch metadata now and install it: for ``topics``, every topic (``all_topics``), or by
        default the tracked set (:attr:`topics`, None meaning every topic)."""
        wanted: list[str] | None
        if all_topics:
            wanted = None
        elif topics is not None:
            wanted = sorted(topics)
        else:
            wanted = sorted(self.topics) if self.topics is not None else None
        auto = self.allow_auto_create if allow_auto_create is None else allow_auto_create

        def build(conn: BrokerConnection) -> Any:
            # v10+ answer with topic ids (KIP-516), which Fetch v13+ names topics by; the
            # client asks by name (v12 could ask by id, which it never needs)
            version = conn.version(ApiKey.METADATA, max_version=12)
            # "every topic" is an empty list in v0 and null later
            every: list[Any] | None = [] if version == 0 else None
            names = every if wanted is None else [{"name": t, "topic_id": None} for t in wanted]
            return make_request(
                ApiKey.METADATA,
                version,
                topics=names,
                allow_auto_topic_creation=auto,
                include_cluster_authorized_operations=False,
                include_topic_authorized_operations=False,
            )

        async with self._refresh_lock:
            response = await self.send_any(build)
            update = snapshot_from_metadata(response)
            for name, (was, now) in sorted(changed_topic_ids(self.topic_ids, update).items()):
                # Java's Metadata logs it too, and takes the new topic's partitions whatever
                # their leader epochs (a snapshot here always replaces the old one); the
                # fetcher's session replaces the topic's partitions (fetch_session_handler)
                log.info("topic %s has a new topic id %s (was %s): it was deleted and created again", name, now, was)
            self.topic_ids.update((n, t.topic_id) for n, t in update.topics.items() if t.topic_id is not None)
            self.cluster = self.cluster.merged(update, wanted)
            self._install()
        return self.cluster

    def update_leaders(
        self, hints: Mapping[TopicPartition, tuple[int, int]], nodes: Iterable[BrokerInfo]
    ) -> set[TopicPartition]:
        """Take the new leaders a Produce or Fetch answer named (KIP-951, see
        :meth:`ClusterSnapshot.with_leaders`) at once, waking the listeners, and still ask for a
        Metadata refresh in the background, as the Java client does; returns the partitions
        that moved."""
        self.cluster, moved = self.cluster.with_leaders(hints, nodes)
        if moved:
            named = (f"{tp} led by {hints[tp][0]} (epoch {hints[tp][1]})" for tp in sorted(moved))
            log.info("leaders from the broker's hints (KIP-951): %s", ", ".join(named))
            for listener in self.metadata_listeners:
                listener()
        self.request_update()
        return moved

    def follow_leader_hints(
        self, hints: Mapping[TopicPartition, tuple[int, int]], node_endpoints: Iterable[Any]
    ) -> set[TopicPartition]:
        """:meth:`update_leaders` from a Produce (v10+) or Fetch (v16) answer's KIP-951 fields:
        ``hints`` (partition -> current leader id and epoch, from NOT_LEADER_OR_FOLLOWER or
        FENCED_LEADER_EPOCH answers) and the answer's ``node_endpoints``; nothing when no hint."""
        if not hints:
            return set()
        nodes = [BrokerInfo(int(n.node_id), n.host, int(n.port), n.rack) for n in node_endpoints]
        return self.update_leaders(hints, nodes)

    def _install(self) -> None:
        self.metadata_version += 1
        self._last_refresh = trio.current_time()
        self._need_update = False
        event, self._metadata_event = self._metadata_event, trio.Event()
        event.set()
        for listener in self.metadata_listeners:
            listener()

    async def _metadata_loop(self) -> None:
        max_age = self.config["metadata.max.age.ms"] / 1000.0
        failures = 0
        while not self._closed:
            now = trio.current_time()
            if self._need_update:
                due = self._last_refresh + self.retry_backoff.seconds(failures)
            else:
                due = self._last_refresh + max_age
            if now >= due:
                try:
                    await self.refresh_metadata()
                    failures = 0
                except KafkaError as exc:
                    failures += 1
                    self._last_refresh = trio.current_time()
                    self._need_update = True
                    log.debug("metadata refresh failed: %r", exc)
                self._close_idle()
                continue
            self._wakeup_metadata = trio.Event()
            with trio.move_on_at(due):
                await self._wakeup_metadata.wait()

    def _close_idle(self) -> None:
        if self._nursery is None:
            return
        idle = self.config["connections.max.idle.ms"] / 1000.0
        now = trio.current_time()
        for key, conn in list(self._connections.items()):
            if conn.closed or (conn.in_flight == 0 and now - conn.last_used > idle):
                del self._connections[key]
                self._nursery.start_soon(conn.close)

    # -- coordinators ----------------------------------------------------------------------------
    async def find_coordinator(self, key: str, key_type: int = GROUP_COORDINATOR) -> int:
        """Node id of the coordinator for a group (or transactional id); raises KafkaError."""
        build = request_builder(ApiKey.FIND_COORDINATOR, max_version=3, key=key, key_type=key_type)
        response = await self.send_any(build)
        code = error_code(response.error_code)
        if code is not ErrorCode.NONE:
            raise KafkaError(f"FindCoordinator({key!r}) failed with {code.name}", code=code)
        node = int(response.node_id)
        if node not in self.cluster.brokers:
            brokers = dict(self.cluster.brokers)
            brokers[node] = BrokerInfo(node, response.host, int(response.port))
            self.cluster = ClusterSnapshot(
                brokers, self.cluster.topics, self.cluster.controller_id, self.cluster.cluster_id
            )
        return node
