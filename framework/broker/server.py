"""``BrokerServer``: one broker assembled from config and plugins, run in nurseries it owns.

Start-up order (each step needs the previous one):

1. storage: ``plugins.storage(config["storage"]).create(config)``, ``open()`` (recovers logs);
2. metadata: ``plugins.metadata(config["metadata"]).create(config)``, ``open()``; the cluster id
   is read from the store (created on first start);
3. the core (:class:`~odradek.broker.core.BrokerCore`): loads topics and hosts this broker's
   partitions (producer state rebuilt, high watermarks restored from the checkpoint);
4. background tasks: ``LogStorage.run()`` (retention, cleaner, flushes), the replica manager's
   checkpoints, the metadata watch, the log-dir failure checks (a broker left with no online
   log dir stops), the group coordinator;
5. listeners: one per ``listeners`` entry, through the transport ``Plugins.transport_for`` picks
   for its security protocol (the one the broker's own outgoing connections use too);
   their bound addresses (port 0 resolved) are what the broker advertises unless
   ``advertised.listeners`` says otherwise;
6. registration: ``MetadataStore.register_broker`` (ephemeral), then the controller campaign.

``serve(task_status=...)`` reports the bound endpoints through ``task_status.started`` so tests
and ``odradek serve`` use ``nursery.start``. Cancelling it shuts down gracefully, in reverse:
listeners stop accepting and drain in-flight requests, parked requests are answered, producer
state is snapshotted, high watermarks checkpointed and logs flushed, the metadata session closes
(its ephemerals vanish), storage closes.
"""

from __future__ import annotations

import base64
import contextlib
import logging
import socket
import uuid
from pathlib import Path
from typing import Any

import trio

from ..config import WILDCARD_HOSTS, Config, parse_host_port
from ..coordination import broker_key
from ..errors import OdradekError
from ..interfaces import ABSENT, Endpoint, LogStorage, MetadataConflict, MetadataStore, ServerAssignor, SessionState
from ..manager import PluginError, Plugins, load_plugins
from ..metrics_exporter import serve_metrics
from ..replica_selector import ReplicaSelector, builtin_replica_selector, selector_name
from ..security.authorizer import AuthorizerFactory
from ..security.settings import check_security_config, inter_broker_client_config
from ..sessions import MetadataUnavailable
from . import meta_properties
from .alter_partition import AlterPartitionManager
from .controller import Controller
from .core import BrokerCore
from .log_dir_failures import LogDirFailureHandler, LogDirsFailed
from .meta_properties import InconsistentClusterId
from .metadata_cache import CLUSTER_ID_KEY, INTERNAL_TOPICS, MetadataCache, MetadataStoreReset, registration_json
from .remote_log_manager import RemoteLogManager
from .remote_quota import RemoteQuota
from .replica_fetcher import ReplicaFetcherManager

log = logging.getLogger(__name__)

#: Kafka's zookeeper.session.timeout.ms default, used as the metadata session TTL.
SESSION_TTL_MS = 18000
#: how long a stopping broker tries to move its leaderships away (Kafka's controlled shutdown)
CONTROLLED_SHUTDOWN_TIMEOUT_S = 5.0
#: pause between attempts to register again after a lost metadata session
REREGISTER_BACKOFF_S = 0.5
#: how long a starting broker waits for an earlier session's registration of its id to expire (a
#: restart within the session timeout after kill -9); longer than the default session timeouts
#: (18 s for ZooKeeper and etcd), so a registration still there afterwards is a live broker's
REGISTRATION_WAIT_S = 60.0
#: how often the starting broker looks again meanwhile
REGISTRATION_POLL_S = 0.5
#: how long a starting broker lists its tiered partitions' remote segments before it serves (a
#: partition not listed by then is listed by its first remote read or the next interval)
REMOTE_LISTING_AT_START_S = 10.0


class BrokerIdConflict(OdradekError):
    """Another session holds this broker id's registration: another live broker has the same
    ``broker.id``, or an earlier process's session outlived the wait."""


class ListenersStopped(OdradekError):
    """The listeners all ended while the broker was meant to serve (not cancelled): ``serve``
    raises this after its shutdown, so ``odradek serve`` exits non-zero instead of living on."""


class ListenerError(OdradekError):
    """A listener could not bind; the message names it (``listener PLAINTEXT://host:port: ...``),
    since with several listeners the OS error alone does not say which."""


def listener_spec(ep: Endpoint) -> str:
    """``NAME://host:port`` as in ``listeners`` (an IPv6 host in brackets)."""
    host = f"[{ep.host}]" if ":" in ep.host else ep.host
    return f"{ep.name}://{host}:{ep.port}"


def new_cluster_id() -> str:
    """Kafka's format: a random UUID, URL-safe base64 without padding (22 characters)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


async def ensure_cluster_id(store: MetadataStore, configured: str, recorded: str | None = None) -> str:
    """The stored cluster id, created from ``configured`` (or a new one) on first start.

    ``recorded`` is the cluster id the broker's log dirs recorded (``meta.properties``): the
    store must hold the same (Kafka's ``InconsistentClusterIdException``), and a store with
    none is not given a new one: it lost its data (a wiped etcd or ZooKeeper data dir) or is
    the wrong store, and a new id there would make every log this broker has look stray."""
    while True:
        current = await store.get(CLUSTER_ID_KEY)
        if current is not None:
            stored = current.value.decode()
            if configured and configured != stored:
                raise InconsistentClusterId(f"cluster.id is {configured!r} but the metadata store holds {stored!r}")
            if recorded is not None and recorded != stored:
                raise InconsistentClusterId(
                    f"the cluster id {stored} of the metadata store doesn't match the cluster id {recorded} "
                    f"in {meta_properties.FILE_NAME} of the log dirs: is the broker pointed at another cluster's "
                    "metadata store? (see docs/operations.md, 'Metadata store lost or reset')"
                )
            return stored
        if recorded is not None:
            raise InconsistentClusterId(
                f"the metadata store has no cluster id, but the log dirs belong to cluster {recorded} "
                f"({meta_properties.FILE_NAME}): the metadata store looks empty or reset (its data lost?) "
                "or is the wrong one; refusing to start rather than create a new cluster over these logs. "
                "(The embedded metadata store lives in the first of log.dirs: a dir put in front of the list "
                "looks like this too.) Restore the store, or see docs/operations.md, 'Metadata store lost or reset'"
            )
        try:
            await store.put(CLUSTER_ID_KEY, (configured or new_cluster_id()).encode(), expect=ABSENT)
        except MetadataConflict:
            continue


def advertised_endpoints(config: Config, bound: list[Endpoint]) -> list[Endpoint]:
    """``advertised.listeners`` when set, else the bound addresses (a wildcard host becomes this
    machine's name, as Kafka does)."""
    if config["advertised.listeners"]:
        return config.advertised_listeners
    out = []
    for ep in bound:
        host = ep.host
        if host in (*WILDCARD_HOSTS, ""):
            host = socket.getfqdn()
        out.append(Endpoint(ep.name, host, ep.port, ep.security_protocol))
    return out


class BrokerServer:
    """A whole broker: storage, metadata, core, background tasks, listeners."""

    def __init__(self, config: Config, plugins: Plugins | None = None) -> None:
        self.config = config
        self.plugins = (
            plugins or config.plugins or load_plugins(extra=config["plugins"], disabled=config["plugins.disabled"])
        )
        self.storage: LogStorage | None = None
        self.store: MetadataStore | None = None
        self.core: BrokerCore | None = None
        self._authorizer_factory: AuthorizerFactory | None = None
        #: ``replica.selector.class``'s selector (KIP-392), resolved when the broker starts
        self._selector: ReplicaSelector | None = None
        self.controller: Controller | None = None
        self.endpoints: list[Endpoint] = []
        #: where ``metrics.prometheus.listener`` serves metrics (the bound port), once serving
        self.metrics_address: tuple[str, int] | None = None
        self.broker_epoch = -1
        #: whether the metadata session was lost and no new one registered this broker yet
        self._session_lost = False
        #: one registration at a time: a new session's and one after a deleted registration
        self._registering = trio.Lock()
        #: the inter-broker client's SASL settings, built once (an OAUTHBEARER login keeps its token)
        self._inter_broker_sasl: dict[str, Any] | None = None

    async def serve(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Run the broker until cancelled; reports the bound endpoints when it is serving."""
        config = self.config
        check_security_config(config)  # a SASL listener that cannot work stops the broker here
        inter_broker = config.inter_broker_listener
        if inter_broker is not None and "SSL" in inter_broker.security_protocol:
            # built now so a bad inter-broker TLS setting (a truststore that does not exist)
            # stops the start naming its key, instead of failing every replica fetch later
            self._connector()
        # an authorizer no plugin offers stops the broker before it opens anything
        authorizer_class = str(config["authorizer.class.name"]).strip()
        self._authorizer_factory = self.plugins.authorizer(authorizer_class) if authorizer_class else None
        # and so does a replica selector (KIP-392) no plugin offers
        self._replica_selector(str(config["replica.selector.class"]).strip())
        storage = self.plugins.storage(config["storage"]).create(config)
        store = self.plugins.metadata(config["metadata"]).create(config)
        self.storage, self.store = storage, store
        meta_properties.check_log_dirs_present(config.log_dirs)  # before the storage creates them
        await storage.open()
        try:
            await store.open(0)  # <= 0: the plugin's key (zookeeper.session.timeout.ms, etcd.lease.ttl.ms)
            try:
                await self._serve_with(storage, store, task_status)
            finally:
                with trio.CancelScope(shield=True):
                    await store.close()
        finally:
            with trio.CancelScope(shield=True):
                await storage.close()
            log.info("broker %d: storage closed", config.broker_id)

    run = serve  # ``nursery.start(server.run)`` reads as well

    async def _serve_with(self, storage: LogStorage, store: MetadataStore, task_status: Any) -> None:
        config = self.config
        # logs the metadata does not know are stray only when the store already had a cluster
        # id and the log dirs recorded that same id (meta.properties): a new, empty store (a
        # wrong address, lost metadata) or log dirs not yet known to be this cluster's (the
        # operator removed meta.properties to start over) would make every log look stray
        known_store = await store.get(CLUSTER_ID_KEY) is not None
        recorded = meta_properties.recorded_cluster_id(config.log_dirs, config.broker_id)
        cluster_id = await ensure_cluster_id(store, str(config["cluster.id"]), recorded)
        meta_properties.record(config.log_dirs, config.broker_id, cluster_id)
        await self._wait_for_earlier_registration(store)
        core = BrokerCore(config, storage, store, self.plugins.codecs(), cluster_id=cluster_id)
        core.replica_manager.replica_selector = self._selector
        core.metadata_cache.cluster_id = cluster_id
        core.metadata_cache.delete_stray_logs = known_store and recorded == cluster_id
        self.core = core
        # before anything runs: a remote storage that cannot be built (no remote.log.storage.dir)
        # stops the broker with its error
        remote_log_manager = self._remote_log_manager(core)
        await core.start()
        if self._authorizer_factory is not None:
            core.authorizer = self._authorizer_factory.create(config, store)
            await core.authorizer.start()  # every ACL is loaded before the first request
        async with trio.open_nursery() as background:
            # background work outlives the listeners: while they drain in-flight requests after a
            # cancel, the metadata watch, the storage's flushes and the group coordinator must
            # still run, so each runs in a shielded scope cancelled only after the drain
            scopes: list[trio.CancelScope] = []
            self._spawn(background, scopes, storage.run)
            self._spawn(background, scopes, core.replica_manager.run)
            self._spawn(background, scopes, core.alter_log_dirs.run)
            if remote_log_manager is not None:
                self._spawn(background, scopes, remote_log_manager.run)
            self._spawn(background, scopes, core.metadata_cache.run)
            self._spawn(background, scopes, core.metadata_cache.retry_unhosted_forever)
            self._spawn(background, scopes, core.quotas.configs.run)
            self._spawn(background, scopes, core.dynamic_config.run)
            self._spawn(background, scopes, core.ip_connection_rates.run)
            if core.authorizer is not None:
                self._spawn(background, scopes, core.authorizer.run)
            dir_failures = LogDirFailureHandler(
                config.broker_id, storage, store, core.replica_manager, metadata_dir=self._metadata_dir(config)
            )
            self._spawn(background, scopes, dir_failures.run)
            self._spawn(background, scopes, lambda: self._stop_when_log_dirs_failed(dir_failures))
            alter_partition = AlterPartitionManager(config, store, core.metadata_cache, core.replica_manager)
            self._spawn(background, scopes, alter_partition.run)
            fetchers = ReplicaFetcherManager(
                config,
                core.replica_manager,
                core.metadata_cache,
                self._connector,
                quota=core.follower_replication_quota,
            )
            self._spawn(background, scopes, fetchers.run)
            fetcher_scope = scopes[-1]
            try:
                if remote_log_manager is not None:
                    # the hosted tiered partitions know their remote segments before the listeners
                    # serve: a consumer's earliest offset and reads below the local log need them
                    # (bounded: a hanging remote storage must not keep the broker from serving)
                    await remote_log_manager.refresh_all(REMOTE_LISTING_AT_START_S)
                await self._start_group_coordinator(core, background, scopes)
                from .txn.wiring import start_transaction_coordinator  # after the groups: TxnOffsetCommit needs them

                await start_transaction_coordinator(
                    core, config, lambda fn: self._start(background, scopes, fn), self._connector
                )
                await self._start_metrics(core, background, scopes)
            except BaseException:
                for scope in scopes:  # shielded tasks would keep the nursery (and serve) open forever
                    scope.cancel()
                raise
            registered = False
            try:
                async with trio.open_nursery() as listeners:
                    bound: list[Endpoint] = []
                    for ep in config.listeners:
                        factory = self.plugins.transport_for(ep.security_protocol, config["transport"])
                        listener = factory.listener(config, core, ep)
                        try:
                            bound.extend(await listeners.start(listener.serve))
                        except OSError as exc:  # a port in use, a host that does not resolve or is not local
                            raise ListenerError(f"listener {listener_spec(ep)}: {exc}") from exc
                    self.endpoints = bound
                    advertised = advertised_endpoints(config, bound)
                    core.metadata_cache.local_endpoints = {
                        e.name: (e.host, e.port, e.security_protocol) for e in advertised
                    }
                    inter_broker = config.inter_broker_listener
                    core.metadata_cache.inter_broker_listener = inter_broker.name if inter_broker else None
                    info = registration_json(
                        [(e.name, e.host, e.port, e.security_protocol) for e in advertised],
                        config["broker.rack"] or None,
                    )
                    self.broker_epoch = await self._register(store, info)
                    core.metadata_cache.registered_epoch = self.broker_epoch
                    registered = True
                    self.controller = Controller(config, store, core.metadata_cache, core.dynamic_config)
                    core.controller = self.controller
                    await self._start(background, scopes, self.controller.run)
                    controller = self.controller
                    self._spawn(background, scopes, lambda: self._follow_session(store, info, controller))
                    self._spawn(background, scopes, lambda: self._keep_registered(store, info, core.metadata_cache))
                    self._spawn(background, scopes, lambda: self._stop_when_halted(core.metadata_cache, controller))
                    log.info(
                        "broker %d serving cluster %s (broker epoch %d)",
                        config.broker_id,
                        cluster_id,
                        self.broker_epoch,
                    )
                    task_status.started(bound)
                # not cancelled, so every listener returned by itself: a broker that accepts
                # nobody must not stay alive looking healthy (the process would never exit)
                raise ListenersStopped(
                    f"broker {config.broker_id}: every listener stopped; nothing left to serve, shutting down"
                )
            finally:
                # listeners have drained (or failed): hand leaderships over, stop following,
                # answer parked requests, persist state
                # whatever fails here, the shielded background tasks must be cancelled, or
                # they keep the nursery (and the process) alive forever
                try:
                    with trio.CancelScope(shield=True):
                        # only a registered broker hands leaderships over: one that never
                        # registered would act on another session's behalf
                        if registered and core.metadata_cache.halted is None:
                            with trio.move_on_after(CONTROLLED_SHUTDOWN_TIMEOUT_S):
                                try:
                                    await alter_partition.controlled_shutdown()
                                except Exception:
                                    log.exception(
                                        "controlled shutdown failed; the controller elects after session expiry"
                                    )
                        fetcher_scope.cancel()
                        await core.shutdown()
                        if core.authorizer is not None:
                            await core.authorizer.close()
                finally:
                    for scope in scopes:
                        scope.cancel()

    async def _start_metrics(self, core: BrokerCore, background: trio.Nursery, scopes: list[trio.CancelScope]) -> None:
        """Serve the metrics for Prometheus when ``metrics.prometheus.listener`` asks for it (before
        the listeners, so a broker that serves clients can be watched); a port in use stops the
        start, as a listener's does."""
        spec = str(self.config["metrics.prometheus.listener"])
        if not spec:
            return
        host, port = parse_host_port(spec, "metrics.prometheus.listener")
        try:
            self.metrics_address = await self._start(
                background, scopes, lambda *, task_status: serve_metrics(core, host, port, task_status=task_status)
            )
        except OSError as exc:
            raise ListenerError(f"metrics.prometheus.listener {spec}: {exc}") from exc

    def _remote_log_manager(self, core: BrokerCore) -> RemoteLogManager | None:
        """Tiered storage (KIP-405) when ``remote.log.storage.system.enable`` is true: the
        remote storage plugin's pair, wired into the replica manager's fetches."""
        config = self.config
        if not config["remote.log.storage.system.enable"]:
            return None
        factory = self.plugins.remote_storage(str(config["remote.log.storage.manager"]))
        storage, metadata = factory.create(config)
        manager = RemoteLogManager(
            config.broker_id,
            core.replica_manager,
            storage,
            metadata,
            interval_ms=int(config["remote.log.manager.task.interval.ms"]),
            reader_threads=int(config["remote.log.reader.threads"]),
            reader_max_pending_tasks=int(config["remote.log.reader.max.pending.tasks"]),
            fetch_max_wait_ms=int(config["remote.fetch.max.wait.ms"]),
            copier_threads=int(config["remote.log.manager.copier.thread.pool.size"]),
            expiration_threads=int(config["remote.log.manager.expiration.thread.pool.size"]),
            copy_quota=RemoteQuota(
                samples=int(config["remote.log.manager.copy.quota.window.num"]),
                window_s=float(config["remote.log.manager.copy.quota.window.size.seconds"]),
            ),
            list_offsets_timeout_ms=int(config["remote.list.offsets.request.timeout.ms"]),
            fetch_quota=RemoteQuota(
                samples=int(config["remote.log.manager.fetch.quota.window.num"]),
                window_s=float(config["remote.log.manager.fetch.quota.window.size.seconds"]),
            ),
        )
        dynamic = core.dynamic_config

        def apply_quotas() -> None:  # KIP-956's rates are dynamic broker configs
            manager.apply_quotas(
                int(dynamic.value("remote.log.manager.copy.max.bytes.per.second")),
                int(dynamic.value("remote.log.manager.fetch.max.bytes.per.second")),
            )

        dynamic.listeners.append(apply_quotas)
        apply_quotas()
        core.replica_manager.remote_log_manager = manager
        log.info("broker %d: tiered storage on, remote storage %r", config.broker_id, factory.name)
        return manager

    async def _wait_for_earlier_registration(self, store: MetadataStore) -> None:
        """Before anything starts, wait for a registration of this broker id that an earlier
        session holds to go away.

        After kill -9 and a restart within the session timeout, the dead process's ephemeral
        registration is still there. Kafka refuses to start then (its supervisor retries); this
        broker waits for the session to expire instead, so the restart just works, and nothing
        runs meanwhile: no listener, no partition, no group is served on metadata that still
        names the dead process as alive (the broker used to start all of that, fail at
        registration with a traceback and then, in its shutdown, move leaderships around)."""
        broker_id = self.config.broker_id
        key = broker_key(broker_id)
        if await store.get(key) is None:
            return
        log.info(
            "broker %d is still registered by an earlier session (a restart within the session timeout?): "
            "waiting up to %.0f s for it to expire",
            broker_id,
            REGISTRATION_WAIT_S,
        )
        with trio.move_on_after(REGISTRATION_WAIT_S):
            while await store.get(key) is not None:
                await trio.sleep(REGISTRATION_POLL_S)
            log.info("broker %d: the earlier registration expired", broker_id)
            return
        raise BrokerIdConflict(
            f"broker id {broker_id} is registered by another session that stayed alive for "
            f"{REGISTRATION_WAIT_S:.0f} s: is another broker running with broker.id={broker_id}?"
        )

    async def _register(self, store: MetadataStore, info: bytes) -> int:
        """``register_broker``, with a conflict (another session registered this id since the
        wait above) as a one-line error instead of a traceback. A session lost meanwhile (an
        etcd lease expired during a long pause or the wait above) or a store away is what a
        running broker survives too: wait for the store's next session and register in it."""
        broker_id = self.config.broker_id
        while True:
            try:
                return await store.register_broker(broker_id, info)
            except MetadataConflict as exc:
                raise BrokerIdConflict(
                    f"broker id {broker_id} is registered by another session: is another broker running "
                    f"with broker.id={broker_id}? ({exc})"
                ) from exc
            except MetadataUnavailable as exc:
                log.warning("registering broker %d failed (%s); registering again in a new session", broker_id, exc)
            async for state in store.session_states():
                if state is SessionState.CONNECTED:
                    break
            await trio.sleep(REREGISTER_BACKOFF_S)

    async def _follow_session(self, store: MetadataStore, info: bytes, controller: Controller) -> None:
        """What Kafka's broker does when its ZooKeeper session expires: the registration (an
        ephemeral) and any controllership died with the session, so stop controlling at once and,
        once the store has a new session, register again (a new broker epoch) and campaign again.
        Without this, a broker paused or cut off past its session stayed unregistered for good:
        the others saw it as dead and kept taking it out of every ISR."""
        async for state in store.session_states():
            if state is SessionState.LOST:
                if not self._session_lost:
                    log.warning(
                        "metadata session lost: broker %d is unregistered until a new session", self.config.broker_id
                    )
                self._session_lost = True
                controller.session_lost()
            elif state is SessionState.CONNECTED and self._session_lost:
                # the new session may be on a server that lost its data (restarted with an empty
                # data dir): registering and campaigning there would start a new cluster over ours
                if not await controller.cache.check_cluster_id("a new metadata session after the last was lost"):
                    return
                async with self._registering:
                    await self._register_again(store, info)
                self._session_lost = False

    async def _keep_registered(self, store: MetadataStore, info: bytes, cache: MetadataCache) -> None:
        """Register again when this broker's registration is deleted while its session lives
        (an operator's or a tool's delete of ``/brokers/ids/<id>``, or of the whole chroot).

        Kafka's broker re-registers only in a new session, so a deleted registration left a live
        broker looking dead until its next session: the controller took it out of every ISR and
        its partitions went offline. The registration is the broker's claim to be alive, so it is
        made again (a new broker epoch), after checking that the store still holds this cluster:
        a chroot deleted as a whole took the cluster id with it, and the broker halts as after a
        store reset. A deletion seen while the session is lost is :meth:`_follow_session`'s."""
        send, receive = trio.open_memory_channel[None](1)

        def deleted() -> None:
            with contextlib.suppress(trio.WouldBlock):
                send.send_nowait(None)

        cache.registration_deleted_listeners.append(deleted)
        key = broker_key(self.config.broker_id)
        async with receive:
            async for _ in receive:
                if self._session_lost:
                    continue
                if not await cache.check_cluster_id(f"the registration {key} was deleted"):
                    return
                async with self._registering:
                    if self._session_lost or await store.get(key) is not None:
                        continue  # a new session's registration, or one made meanwhile
                    log.warning(
                        "broker %d: its registration %s was deleted while its metadata session lives "
                        "(by an operator or a tool?); registering again",
                        self.config.broker_id,
                        key,
                    )
                    await self._register_again(store, info)

    @staticmethod
    async def _stop_when_halted(cache: MetadataCache, controller: Controller) -> None:
        """Once the metadata cache halted (the store lost this cluster's id), stop controlling
        and end the broker: ``serve`` raises ``MetadataStoreReset``, so ``odradek serve`` exits
        non-zero instead of serving from, or acting on, a store that is not its cluster's."""
        await cache.halted_event.wait()
        controller.session_lost()
        raise MetadataStoreReset(
            f"broker {cache.broker_id} stopped: the metadata store is not cluster {cache.cluster_id}'s any more"
        )

    def _metadata_dir(self, config: Config) -> str | None:
        """The log dir the metadata store keeps its data in (``MetadataFactory.log_dir``), resolved
        as the storage names its dirs; None for a store on servers of its own."""
        where = self.plugins.metadata(config["metadata"]).log_dir
        return None if where is None else str(Path(where(config)).resolve())

    @staticmethod
    async def _stop_when_log_dirs_failed(handler: LogDirFailureHandler) -> None:
        """Once no log dir is online, or the one the metadata store keeps its data in failed,
        end the broker (Kafka halts it): ``serve`` raises ``LogDirsFailed``, so ``odradek serve``
        exits non-zero with one line naming the dirs, instead of living on with nothing to serve
        or a store it cannot write. The offline replicas are published first (unless the store
        is the one lost), so the controller moves the leaderships at once."""
        await handler.must_stop.wait()
        with trio.move_on_after(CONTROLLED_SHUTDOWN_TIMEOUT_S):
            try:
                await handler.publish()
            except Exception as exc:  # the store away, or kept in the failed dir (meta_local)
                log.warning("offline replicas not published: %s", exc)
        raise LogDirsFailed(handler.failure_reason)

    async def _register_again(self, store: MetadataStore, info: bytes) -> None:
        attempt = 0
        while True:
            try:
                self.broker_epoch = await store.register_broker(self.config.broker_id, info)
            except Exception as exc:  # the old registration not gone yet, or the store away again
                attempt += 1
                if attempt % 20 == 1:
                    log.warning("re-registering broker %d failed (%s); retrying", self.config.broker_id, exc)
                await trio.sleep(REREGISTER_BACKOFF_S)
                continue
            if self.core is not None:
                self.core.metadata_cache.registered_epoch = self.broker_epoch
            log.info("broker %d registered again (broker epoch %d)", self.config.broker_id, self.broker_epoch)
            return

    def _connector(self) -> Any:
        """How this broker reaches the others (replica fetchers, the transaction marker channel):
        the inter-broker listener's security protocol (``inter.broker.listener.name``, else the
        first listener) and, over TLS, its keystore and truststore, through the transport its listeners use (the
        ``transport`` setting, else the one serving that protocol), so a broker never serves one
        transport and fetches over another."""
        listener = self.config.inter_broker_listener
        if listener is None:
            return self.plugins.transport_for("PLAINTEXT", self.config["transport"]).connector({})
        # over TLS the listener's keystore and truststore; over SASL the broker authenticates as
        # sasl.mechanism.inter.broker.protocol with the username/password of that mechanism's
        # JAAS config (both checked at start-up); SASL_SSL takes both
        if self._inter_broker_sasl is None:  # once: an OAUTHBEARER token is shared by every connection
            self._inter_broker_sasl = inter_broker_client_config(self.config, listener, self.plugins.sasl_mechanisms())
        client_config = {**self.config.inter_broker_client_config(), **self._inter_broker_sasl}
        return self.plugins.transport_for(listener.security_protocol, self.config["transport"]).connector(client_config)

    @staticmethod
    def _spawn(nursery: trio.Nursery, scopes: list[trio.CancelScope], fn: Any) -> None:
        scope = trio.CancelScope(shield=True)
        scopes.append(scope)

        async def run_shielded() -> None:
            with scope:
                await fn()

        nursery.start_soon(run_shielded)

    @staticmethod
    async def _start(nursery: trio.Nursery, scopes: list[trio.CancelScope], fn: Any) -> Any:
        """``nursery.start(fn)`` with ``fn`` shielded like :meth:`_spawn`."""
        scope = trio.CancelScope(shield=True)
        scopes.append(scope)

        async def run_shielded(*, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
            with scope:
                await fn(task_status=task_status)

        return await nursery.start(run_shielded)

    def _replica_selector(self, name: str) -> ReplicaSelector | None:
        """``replica.selector.class``'s selector (None when empty), kept for the core. The
        built-in ``leader`` and ``rack-aware`` are the broker's own too, as the server assignors
        are, for a plugin set that leaves out ``default_assignors``."""
        selector: ReplicaSelector | None = None
        if name:
            try:
                selector = self.plugins.replica_selector(name)
            except PluginError:
                selector = builtin_replica_selector(selector_name(name))
                if selector is None:
                    raise
        self._selector = selector
        return selector

    def _server_assignor(self, name: str) -> ServerAssignor:
        """A ``group.consumer.assignors`` entry from the plugins; ``uniform`` and ``range`` are
        the broker's own too, so a broker whose plugin set leaves out ``default_assignors`` (a
        client-side plugin for most) still serves KIP-848 groups. Any other unknown name fails
        the start, naming what is loaded."""
        from .group.consumer_coordinator import builtin_server_assignors

        try:
            return self.plugins.server_assignor(name)
        except PluginError:
            if name in ("uniform", "range"):
                return builtin_server_assignors([name])[name]
            raise

    async def _start_group_coordinator(
        self, core: BrokerCore, nursery: trio.Nursery, scopes: list[trio.CancelScope]
    ) -> None:
        """The consumer-group coordinator over ``__consumer_offsets`` through the core."""
        from .group import BrokerOffsetsLog, GroupCoordinator

        cache = core.metadata_cache

        def topic(name: str) -> tuple[str, int] | None:
            """A KIP-848 subscription's topic: (id, partition count), None when it does not exist."""
            state = cache.topics.get(name)
            return (state.topic_id, len(state.assignment)) if state is not None and state.topic_id else None

        assignors = {name: self._server_assignor(name) for name in self.config["group.consumer.assignors"]}

        def all_topics() -> list[str]:
            """What a KIP-848 regex subscription may match: every topic but the internal ones."""
            return [name for name in cache.topics if name not in INTERNAL_TOPICS]

        def partition_racks(name: str) -> dict[int, frozenset[str]]:
            """The racks of each partition's replicas (rack-aware KIP-848 assignment)."""
            state = cache.topics.get(name)
            if state is None:
                return {}
            out = {}
            for p, replicas in state.assignment.items():
                racks = frozenset(r for b in replicas if (r := cache.rack_of(b)) is not None)
                if racks:
                    out[p] = racks
            return out

        coordinator = GroupCoordinator(
            BrokerOffsetsLog(core, self.config),
            self.config,
            server_assignors=assignors,
            topics=topic,
            all_topics=all_topics,
            partition_racks=partition_racks,
        )
        await self._start(nursery, scopes, coordinator.run)
        core.group_coordinator = coordinator
        core.metadata_cache.topic_deleted_listeners.append(coordinator.on_topic_deleted)
