"""Kafka's ``TransactionCoordinator``: transactional ids, their producer ids and epochs, and the
two-phase end of every transaction.

One coordinator per broker owns the transactional ids whose ``__transaction_state`` partition
(``hash(transactional.id) % transaction.state.log.num.partitions``) this broker leads; it reloads
them from the log when it gains a partition. Every state change is written to the log (acks=all)
*before* it becomes the cached state, so a restart resumes from the last durable state: a
transaction found in PrepareCommit/PrepareAbort has its markers (re)written and is completed.

EndTxn: Ongoing -> PrepareCommit|PrepareAbort (durable: the outcome is decided) -> a COMMIT or
ABORT control batch into every data partition of the transaction through the replica manager
(:class:`MarkerWriter`), the transaction's consumer offsets materialised or dropped
(:class:`~.offsets.PendingTxnOffsets`) -> CompleteCommit|CompleteAbort. While markers are being
written, requests for the id answer CONCURRENT_TRANSACTIONS (clients retry). A transaction older
than its timeout, or still open when its producer re-initialises, is aborted with the epoch
bumped, which fences the old producer instance.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable, Collection, Iterable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Protocol

import trio

from ...errors import CorruptMessage, ErrorCode
from ...interfaces import TopicPartition
from ...records import ControlRecordType
from ..api import InitProducerIdResult
from ..group.group_coordinator import FindCoordinatorResult
from ..group.hashing import partition_for
from ..group.offsets_log import OFFSETS_TOPIC
from ..load_failures import FailedLoads
from .listing import ListTransactionsResult, TransactionDescription, describe_transaction, list_transactions
from .log import TRANSACTION_STATE_TOPIC, TransactionLog
from .schema import parse_txn_key, parse_txn_value, txn_key, txn_value
from .state import TransactionMetadata, TransactionState

if TYPE_CHECKING:
    from ...config import Config

log = logging.getLogger(__name__)

#: Kafka bumps to a new producer id before the int16 epoch would overflow.
MAX_EPOCH = 32767 - 1
#: the int16 epoch's last value (Short.MaxValue): only a fence reaches it (Kafka's
#: prepareFenceProducerEpoch), never InitProducerId, which rotates the producer id after MAX_EPOCH
MAX_FENCE_EPOCH = 32767
#: Kafka's transaction.abort.timed.out.transaction.cleanup.interval.ms default
ABORT_INTERVAL_MS = 10_000
#: how often leadership of ``__transaction_state`` partitions is re-checked
OWNERSHIP_REFRESH_S = 0.5
#: how long InitProducerId without a prior FindCoordinator waits for the log's leader
OWNERSHIP_WAIT_S = 5.0
#: how long FindCoordinator (and InitProducerId without one) waits for the load of the id's
#: partition before answering: a new or small partition is waited out, a big one is not (its
#: ids get COORDINATOR_LOAD_IN_PROGRESS until the load ends, and clients retry), as the group
#: coordinator's FIND_COORDINATOR_LOAD_WAIT_S
LOAD_WAIT_S = 1.0
#: marker retries back off from this, doubling up to the maximum (Kafka retries each
#: retriable marker error until it is written or the coordinator is no longer in charge)
MARKER_RETRY_BACKOFF_S = 0.1
MARKER_RETRY_BACKOFF_MAX_S = 2.0
#: how long EndTxn waits for the markers before answering anyway: the outcome is durable once
#: Prepare* is written, and the markers go on in the background (Kafka answers at once)
END_TXN_WAIT_S = 10.0
#: marker outcomes that finish a partition: written, the partition deleted (the channel's
#: UNKNOWN_TOPIC_OR_PARTITION), or a log that cannot hold markers (Kafka drops those partitions)
_MARKER_DONE = frozenset(
    {
        ErrorCode.NONE,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT,
        ErrorCode.UNSUPPORTED_VERSION,
    }
)
#: marker outcomes that mean a newer producer or coordinator took over: stop sending (Kafka's
#: TransactionMarkerRequestCompletionHandler)
_MARKER_SUPERSEDED = frozenset(
    {ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.TRANSACTION_COORDINATOR_FENCED, ErrorCode.PRODUCER_FENCED}
)


class MarkerWriter(Protocol):
    """Writes a transaction marker into partitions through their leaders (Kafka's
    ``TransactionMarkerChannelManager``; :class:`~.markers.TransactionMarkerChannel`)."""

    async def write_markers(
        self,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        result: ControlRecordType,
        partitions: Collection[TopicPartition],
    ) -> dict[TopicPartition, ErrorCode]:
        """Per partition: NONE once written, UNKNOWN_TOPIC_OR_PARTITION if the partition no longer
        exists (it needs no marker), INVALID_PRODUCER_EPOCH / TRANSACTION_COORDINATOR_FENCED if a
        newer producer or coordinator took over, another error to retry."""
        ...


class ProducerIdSource(Protocol):
    async def generate_producer_id(self) -> int: ...


class TxnOffsetSink(Protocol):
    """Where AddOffsetsToTxn learns a group's offsets partition. The offsets themselves are
    settled by the marker in that partition, on its leader (:class:`~.markers.MarkerAppender`)."""

    def offsets_partition(self, group_id: str) -> int | None:
        """The group's ``__consumer_offsets`` partition as its coordinator places it (None: no
        group coordinator here)."""
        ...


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


def _append_error(error: ErrorCode) -> ErrorCode:
    """What a client sees when a ``__transaction_state`` write failed (Kafka's mapping)."""
    if error in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION):
        return ErrorCode.NOT_COORDINATOR
    return ErrorCode.COORDINATOR_NOT_AVAILABLE


class IdLocks:
    """One ``trio.Lock`` per transactional id, existing only while a task holds it or waits for
    it. Any client can name any id (EndTxn, AddPartitionsToTxn of ids that do not exist are
    answered INVALID_PRODUCER_ID_MAPPING), so a lock kept per id named would grow without bound;
    Kafka keeps no state for ids it does not know either."""

    def __init__(self) -> None:
        #: id -> its lock and how many tasks hold it or wait for it
        self._entries: dict[str, tuple[trio.Lock, list[int]]] = {}

    def __len__(self) -> int:
        return len(self._entries)

    @asynccontextmanager
    async def hold(self, transactional_id: str) -> AsyncIterator[None]:
        """Hold the id's lock for the ``async with`` block; the last task out drops it."""
        entry = self._entries.get(transactional_id)
        if entry is None:
            entry = self._entries[transactional_id] = (trio.Lock(), [0])
        lock, users = entry
        users[0] += 1
        try:
            async with lock:
                yield
        finally:
            users[0] -= 1
            if users[0] == 0:
                del self._entries[transactional_id]


class TransactionCoordinator:
    """Transactional ids of the ``__transaction_state`` partitions this broker leads."""

    def __init__(
        self,
        txn_log: TransactionLog,
        producer_ids: ProducerIdSource,
        markers: MarkerWriter,
        config: Config,
        *,
        node_id: int | None = None,
        now_ms: Callable[[], int] = _wall_ms,
        partition_exists: Callable[[TopicPartition], bool] | None = None,
        txn_offsets: TxnOffsetSink | None = None,
    ) -> None:
        self.log = txn_log
        self.producer_ids = producer_ids
        self.markers = markers
        self.node_id = config.broker_id if node_id is None else node_id
        self.now_ms = now_ms
        self.partition_exists = partition_exists
        self.txn_offsets = txn_offsets
        self.max_timeout_ms = int(config["transaction.max.timeout.ms"])
        self.offsets_partitions = int(config["offsets.topic.num.partitions"])
        self.abort_interval_ms = ABORT_INTERVAL_MS
        self.id_expiration_ms = int(config["transactional.id.expiration.ms"])
        self.transactions: dict[str, TransactionMetadata] = {}
        self.owned: set[int] = set()
        self.loading: set[int] = set()
        self.coordinator_epochs: dict[int, int] = {}
        #: partitions another broker leads (their ids cannot be verified on this broker's produce path)
        self.remote: set[int] = set()
        #: partitions of an existing log without a live leader (after a restart, until this broker
        #: has registered): who coordinates their ids is not known yet
        self.leaderless: set[int] = set()
        self.active = False
        self._locks = IdLocks()
        #: transactional id -> done event / cancel scope of its running marker task
        self._completing: dict[str, trio.Event] = {}
        self._completion_scopes: dict[str, trio.CancelScope] = {}
        self.end_txn_wait_s = END_TXN_WAIT_S
        self._ownership_lock = trio.Lock()
        #: the leader epoch each owned partition was loaded under
        self._loaded_epochs: dict[int, int] = {}
        self._nursery: trio.Nursery | None = None
        #: partitions being loaded in the background (by :meth:`refresh_ownership`): their done
        #: event (set when the load ended, loaded or failed) and the cancel scope of the load
        self._loads: dict[int, tuple[trio.Event, trio.CancelScope]] = {}
        #: partitions whose last load failed, and how each was logged
        self._failed_loads = FailedLoads(log, TRANSACTION_STATE_TOPIC)
        #: transactional id -> partitions its running marker task has not written yet
        self._unmarked: dict[str, set[TopicPartition]] = {}

    def partition_for(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.log.num_partitions)

    # -- lifecycle -----------------------------------------------------------------------------------
    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Load the owned partitions, then follow leadership and abort timed-out transactions."""
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                self.active = True
                if await self.log.exists():  # partitions led already (embedded use, tests) load first
                    await self.refresh_ownership()
                    await self.wait_for_loads()
                task_status.started()
                nursery.start_soon(self._ownership_loop)
                nursery.start_soon(self._abort_loop)
        finally:
            self.active = False
            self._nursery = None

    async def _ownership_loop(self) -> None:
        """Follow leadership of ``__transaction_state``. A failed check (the metadata not
        answering) is logged and tried again at the next interval: it must not end the
        coordinator's nursery, and with it the broker's transactions."""
        while True:
            await trio.sleep(OWNERSHIP_REFRESH_S)
            try:
                if await self.log.exists():
                    await self.refresh_ownership()
            except Exception:
                log.exception("checking leadership of __transaction_state failed; retrying")

    async def _abort_loop(self) -> None:
        while True:
            await trio.sleep(self.abort_interval_ms / 1000)
            try:
                await self.abort_timed_out_transactions()
                await self.expire_transactional_ids()
            except Exception:
                log.exception("aborting timed-out transactions failed; retrying at the next interval")

    async def refresh_ownership(self) -> None:
        """Own the partitions this broker now leads (their loads start in the background:
        :meth:`wait_for_loads`); forget the ones led elsewhere.

        Every newly led partition is marked loading at once, with its leader epoch, and loaded
        in its own task of the coordinator's nursery, as Kafka's
        ``loadTransactionsForTxnTopicPartition`` schedules each load: the ownership lock is held
        only to decide, never for a load, so FindCoordinator is answered while a big partition
        loads, and the ids of every partition waiting for its load get
        COORDINATOR_LOAD_IN_PROGRESS (not NOT_COORDINATOR, which sends clients looking for
        another coordinator)."""
        async with self._ownership_lock:
            leaders = await self.log.leaders()
            for p, leader in leaders.items():
                if leader.node_id == self.node_id:
                    self.coordinator_epochs[p] = leader.leader_epoch
            mine = {p for p, leader in leaders.items() if leader.node_id == self.node_id}
            self.remote = set(leaders) - mine
            self.leaderless = set(range(self.log.num_partitions)) - set(leaders)
            # partitions led elsewhere now, or led again under a new epoch (lost and regained
            # between two checks): forget them, a load under way too (reloaded below when they
            # are ours)
            for p in [p for p in self.owned | self.loading if p in leaders]:
                if p not in mine or self._loaded_epochs.get(p) != leaders[p].leader_epoch:
                    self._unload(p)
            for p in sorted(mine - self.owned - self.loading):
                self.loading.add(p)
                self._loaded_epochs[p] = leaders[p].leader_epoch
                self._start_load(p)

    def _start_load(self, partition: int) -> None:
        """Load ``partition`` in the coordinator's nursery. A load that fails (the log could not
        be read) is logged and leaves the partition unowned and not loading: the next
        ownership check tries again, and its ids answer NOT_COORDINATOR meanwhile, so clients
        look for the coordinator again rather than wait on a load that is not running."""
        assert self._nursery is not None, "the coordinator is not running"
        done, scope = trio.Event(), trio.CancelScope()
        self._loads[partition] = (done, scope)

        async def load() -> None:
            try:
                loaded: dict[str, TransactionMetadata | None] | None = None
                with scope:  # cancelled by _unload: the leadership this load was for is over
                    loaded = await self._read_partition(partition)
                # checked again: the leadership may have ended after the last read
                if loaded is not None and self._is_current_load(partition, done):
                    self._install(partition, loaded)
                self._failed_loads.loaded(partition)
            except Exception as exc:  # retried every ownership check
                self._failed_loads.failed(partition, exc, trio.current_time())
            finally:
                if self._is_current_load(partition, done):  # not ended by _unload, nor replaced
                    del self._loads[partition]
                    self.loading.discard(partition)
                    if partition not in self.owned:
                        self._loaded_epochs.pop(partition, None)
                done.set()

        self._nursery.start_soon(load)

    def _is_current_load(self, partition: int, done: trio.Event) -> bool:
        load = self._loads.get(partition)
        return load is not None and load[0] is done

    async def wait_for_loads(self) -> None:
        """Until the loads started so far have ended (embedded use and tests)."""
        for done, _ in list(self._loads.values()):
            await done.wait()

    async def _wait_for_load(self, partition: int, deadline: float) -> None:
        """Until ``partition``'s load (if one runs) ends, or ``deadline`` (trio time)."""
        load = self._loads.get(partition)
        if load is not None:
            with trio.move_on_at(deadline):
                await load[0].wait()

    def _unload(self, partition: int) -> None:
        """This broker no longer coordinates ``partition`` (or must reload it): drop its ids and
        stop their marker tasks; the partition's new coordinator resumes them from the log."""
        self.owned.discard(partition)
        self._loaded_epochs.pop(partition, None)
        self.loading.discard(partition)
        load = self._loads.pop(partition, None)
        if load is not None:  # a load under a leadership that is over: its result is stale
            load[1].cancel()
            load[0].set()
        for tid in [t for t in self.transactions if self.partition_for(t) == partition]:
            del self.transactions[tid]
            scope = self._completion_scopes.get(tid)
            if scope is not None:
                scope.cancel()

    async def _load(self, partition: int) -> None:
        """Read ``partition`` and own its ids."""
        self._install(partition, await self._read_partition(partition))

    async def _read_partition(self, partition: int) -> dict[str, TransactionMetadata | None]:
        """The last state of every id in ``partition`` (None: deleted); raises when the log
        cannot be read, so a partial read is never installed."""
        loaded: dict[str, TransactionMetadata | None] = {}
        async for key, value in self.log.read(partition):
            try:
                tid = parse_txn_key(key)
                loaded[tid] = None if value is None else parse_txn_value(tid, value)
            except CorruptMessage as exc:
                log.warning("skipping unreadable %s record: %s", "__transaction_state", exc)
        return loaded

    def _install(self, partition: int, loaded: dict[str, TransactionMetadata | None]) -> None:
        """Own ``partition`` with the ids read from it, and resume its prepared transactions.
        Synchronous: no request sees the partition half installed."""
        for tid, md in loaded.items():
            if md is not None:
                self.transactions[tid] = md
        self.owned.add(partition)
        pending = [t for t, md in loaded.items() if md is not None and md.state.is_prepare]
        if loaded:
            log.info(
                "loaded %d transactional ids from partition %d (%d to complete)", len(loaded), partition, len(pending)
            )
        for tid in pending:
            self._spawn_completion(tid)

    def _spawn_completion(self, transactional_id: str) -> trio.Event | None:
        """Start the marker task of a prepared transaction unless it runs already; its done event
        (None when the coordinator is not running)."""
        running = self._completing.get(transactional_id)
        if running is not None or self._nursery is None:
            return running
        done = self._completing[transactional_id] = trio.Event()
        self._nursery.start_soon(self._completion_task, transactional_id, done)
        return done

    async def _completion_task(self, transactional_id: str, done: trio.Event) -> None:
        """Owned by the coordinator's nursery; cancelled when the id's partition is lost."""
        scope = self._completion_scopes[transactional_id] = trio.CancelScope()
        try:
            with scope:
                await self._deliver_markers(transactional_id)
        except Exception:  # never raised into the coordinator's nursery: the periodic task retries
            log.exception("completing the transaction of %r failed; retrying later", transactional_id)
        finally:
            if self._completion_scopes.get(transactional_id) is scope:
                del self._completion_scopes[transactional_id]
            del self._completing[transactional_id]
            done.set()

    # -- helpers ---------------------------------------------------------------------------------------
    def validate(self, transactional_id: str | None) -> ErrorCode | None:
        if not transactional_id:
            return ErrorCode.INVALID_REQUEST
        if not self.active:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        p = self.partition_for(transactional_id)
        if p in self.loading:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        if p not in self.owned:
            return ErrorCode.NOT_COORDINATOR
        return None

    async def _persist(self, md: TransactionMetadata) -> ErrorCode:
        """Write ``md`` to the log; it becomes the cached state only if the write succeeded."""
        tid = md.transactional_id
        error = await self.log.append(self.partition_for(tid), (txn_key(tid), txn_value(md)), self.now_ms())
        if error != ErrorCode.NONE:
            log.warning("writing transaction state of %r failed: %s", tid, error.name)
            return _append_error(error)
        self.transactions[tid] = md
        return ErrorCode.NONE

    @staticmethod
    def _check_producer(md: TransactionMetadata | None, producer_id: int, producer_epoch: int) -> ErrorCode | None:
        if md is None or md.producer_id != producer_id:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if producer_epoch != md.producer_epoch:
            return ErrorCode.PRODUCER_FENCED
        return None

    # -- FindCoordinator -------------------------------------------------------------------------------
    async def find_coordinator(
        self, transactional_id: str, listener_name: str | None = None, *, load_wait_until: float | None = None
    ) -> FindCoordinatorResult:
        """The leader of the id's ``__transaction_state`` partition (creating the topic on first
        use). A load of the partition here is waited for until ``load_wait_until`` (trio time; by
        default LOAD_WAIT_S from now), never the loads of other partitions: the client's next
        request is answered COORDINATOR_LOAD_IN_PROGRESS until it ends, and retried."""
        if not self.active:
            return FindCoordinatorResult(ErrorCode.COORDINATOR_NOT_AVAILABLE, error_message="coordinator not started")
        if not await self.log.exists() and not await self.log.ensure_topic():
            return FindCoordinatorResult(ErrorCode.COORDINATOR_NOT_AVAILABLE, error_message="creating the log")
        p = self.partition_for(transactional_id)
        leader = (await self.log.leaders(listener_name)).get(p)
        if leader is None:
            return FindCoordinatorResult(ErrorCode.COORDINATOR_NOT_AVAILABLE, error_message="no leader")
        if leader.node_id == self.node_id:
            if p not in self.owned | self.loading:
                await self.refresh_ownership()
            if load_wait_until is None:
                load_wait_until = trio.current_time() + LOAD_WAIT_S
            await self._wait_for_load(p, load_wait_until)
        return FindCoordinatorResult(ErrorCode.NONE, leader.node_id, leader.host, leader.port)

    # -- InitProducerId --------------------------------------------------------------------------------
    async def _ensure_owned(self, transactional_id: str) -> None:
        """Create the log and wait (briefly) for this broker to lead the id's partition, when a
        caller skipped FindCoordinator (embedded use); clients always find the coordinator first.
        A load of the partition is waited for at most LOAD_WAIT_S, as by FindCoordinator: a big
        partition is then answered COORDINATOR_LOAD_IN_PROGRESS (by :meth:`validate`), as Kafka
        does, rather than holding the request until the load ends."""
        if not transactional_id or not self.active:
            return
        p = self.partition_for(transactional_id)
        with trio.move_on_after(OWNERSHIP_WAIT_S):
            while p not in self.owned:
                if p in self.loading:
                    await self._wait_for_load(p, trio.current_time() + LOAD_WAIT_S)
                    return
                if await self.log.exists() or await self.log.ensure_topic():
                    leader = (await self.log.leaders()).get(p)
                    if leader is not None and leader.node_id != self.node_id:
                        return
                    await self.refresh_ownership()
                if p not in self.owned | self.loading:
                    await trio.sleep(OWNERSHIP_REFRESH_S / 10)

    async def init_producer_id(
        self, transactional_id: str, transaction_timeout_ms: int, producer_id: int = -1, producer_epoch: int = -1
    ) -> InitProducerIdResult:
        """The id's producer id with the epoch bumped (fencing older instances); an open
        transaction is aborted first (with the epoch bumped, so its markers fence the producer
        that opened it); a new id gets a fresh producer id at epoch 0, and so does an id whose
        epoch is exhausted.

        ``producer_id``/``producer_epoch`` (InitProducerId v3+, KIP-360) are what a producer that
        needs an epoch bump holds: accepted when they are the id's current producer id and
        epoch, or the ones the current epoch was bumped from for that producer (a retry whose
        answer was lost, answered with the current epoch while nothing happened since, or
        KIP-588: a producer whose transaction the coordinator aborted on timeout, bumped
        again). Others are PRODUCER_FENCED. An id the coordinator does not know (expired)
        gets a fresh producer id, as in Kafka: the producer recovers from UNKNOWN_PRODUCER_ID."""
        await self._ensure_owned(transactional_id)
        error = self.validate(transactional_id)
        if error is not None:
            return InitProducerIdResult(error)
        if not 0 < transaction_timeout_ms <= self.max_timeout_ms:
            return InitProducerIdResult(ErrorCode.INVALID_TRANSACTION_TIMEOUT)
        expected = (producer_id, producer_epoch) if producer_id >= 0 else None
        ongoing = self.transactions.get(transactional_id)
        if expected is not None and ongoing is not None and not self._may_reinit(ongoing, *expected):
            return InitProducerIdResult(ErrorCode.PRODUCER_FENCED)
        if ongoing is not None and ongoing.state is TransactionState.ONGOING:
            error = await self._abort(transactional_id, fence=True, expected=ongoing)
            if error not in (ErrorCode.NONE, ErrorCode.CONCURRENT_TRANSACTIONS):
                return InitProducerIdResult(error)
        async with self._locks.hold(transactional_id):
            now = self.now_ms()
            md = self.transactions.get(transactional_id)
            if md is None:
                pid = await self.producer_ids.generate_producer_id()
                new = TransactionMetadata(transactional_id, pid, 0, transaction_timeout_ms, last_update_ms=now)
            elif md.state.is_prepare or md.state is TransactionState.ONGOING:
                if md.state.is_prepare:
                    self._spawn_completion(transactional_id)
                return InitProducerIdResult(ErrorCode.CONCURRENT_TRANSACTIONS)
            elif expected is not None and not self._may_reinit(md, *expected):
                return InitProducerIdResult(ErrorCode.PRODUCER_FENCED)  # another instance got in first
            elif (
                expected is not None
                and md.state is TransactionState.EMPTY
                and expected != (md.producer_id, md.producer_epoch)
            ):
                # a retry whose answer was lost (the epoch it was bumped from, nothing done
                # since): the current epoch again, not a second bump, as Kafka's
                # prepareIncrementProducerEpoch answers it
                if md.timeout_ms == transaction_timeout_ms:
                    return InitProducerIdResult(ErrorCode.NONE, md.producer_id, md.producer_epoch)
                new = md.transition(TransactionState.EMPTY, now, timeout_ms=transaction_timeout_ms)
            else:
                pid, epoch = md.producer_id, md.producer_epoch + 1
                if epoch > MAX_EPOCH:
                    pid, epoch = await self.producer_ids.generate_producer_id(), 0
                new = md.transition(
                    TransactionState.EMPTY,
                    now,
                    producer_id=pid,
                    producer_epoch=epoch,
                    timeout_ms=transaction_timeout_ms,
                    partitions=set(),
                    txn_start_ms=-1,
                    # a producer re-initialising from its epoch may retry from it; a new instance
                    # (no id given) fences every older one
                    last_producer_id=md.producer_id,
                    last_producer_epoch=expected[1] if expected is not None else -1,
                )
            error = await self._persist(new)
            if error != ErrorCode.NONE:
                return InitProducerIdResult(error)
            return InitProducerIdResult(ErrorCode.NONE, new.producer_id, new.producer_epoch)

    @staticmethod
    def _may_reinit(md: TransactionMetadata, producer_id: int, producer_epoch: int) -> bool:
        """Whether a KIP-360 InitProducerId from ``producer_id``/``producer_epoch`` comes from the
        producer the id's state belongs to: its current id and epoch, or the ones the current
        epoch (or producer id, when the epoch was exhausted) was bumped from for it."""
        if producer_epoch < 0:
            return False
        if producer_id == md.producer_id and producer_epoch == md.producer_epoch:
            return True
        return producer_id == md.last_producer_id and producer_epoch == md.last_producer_epoch

    # -- AddPartitionsToTxn / AddOffsetsToTxn ---------------------------------------------------------
    async def add_partitions(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, ErrorCode]:
        """Add partitions to the producer's transaction (starting one if none is open)."""
        wanted = list(dict.fromkeys(partitions))
        error = self.validate(transactional_id)
        if error is not None:
            return dict.fromkeys(wanted, error)
        exists = self.partition_exists
        unknown = {tp for tp in wanted if exists is not None and tp.topic != OFFSETS_TOPIC and not exists(tp)}
        if unknown:
            return {
                tp: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if tp in unknown else ErrorCode.OPERATION_NOT_ATTEMPTED
                for tp in wanted
            }
        async with self._locks.hold(transactional_id):
            md = self.transactions.get(transactional_id)
            error = self._check_producer(md, producer_id, producer_epoch)
            if error is None:
                assert md is not None
                if md.state.is_prepare:
                    error = ErrorCode.CONCURRENT_TRANSACTIONS
                elif md.state is TransactionState.ONGOING and set(wanted) <= md.partitions:
                    error = ErrorCode.NONE
                else:
                    now = self.now_ms()
                    start = md.txn_start_ms if md.state is TransactionState.ONGOING else now
                    new = md.transition(
                        TransactionState.ONGOING, now, partitions=md.partitions | set(wanted), txn_start_ms=start
                    )
                    error = await self._persist(new)
            return dict.fromkeys(wanted, error)

    async def add_offsets(
        self, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str
    ) -> ErrorCode:
        """Add the group's ``__consumer_offsets`` partition: its TxnOffsetCommits become part of the
        transaction (materialised on commit, dropped on abort)."""
        tp = self._offsets_partition(group_id)
        return (await self.add_partitions(transactional_id, producer_id, producer_epoch, [tp]))[tp]

    def _offsets_partition(self, group_id: str) -> TopicPartition:
        """The group's ``__consumer_offsets`` partition: where its coordinator places it (over the
        topic's own partition count), else by the configured count."""
        placed = self.txn_offsets.offsets_partition(group_id) if self.txn_offsets is not None else None
        return TopicPartition(
            OFFSETS_TOPIC, placed if placed is not None else partition_for(group_id, self.offsets_partitions)
        )

    def check_txn_offset_commit(
        self, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str
    ) -> ErrorCode | None:
        """TxnOffsetCommit checks when this broker coordinates the transactional id too: the
        producer's current id and epoch, and the group's offsets partition in its ongoing
        transaction (AddOffsetsToTxn first), else the offsets could never be completed. While
        the id's partition loads (or has no leader yet) the check cannot be made: retriable
        COORDINATOR_LOAD_IN_PROGRESS / COORDINATOR_NOT_AVAILABLE rather than accepting offsets
        of a producer that may have been fenced."""
        p = self.partition_for(transactional_id)
        if p in self.loading:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        if p not in self.owned:
            if p in self.leaderless:
                return ErrorCode.COORDINATOR_NOT_AVAILABLE
            return None  # coordinated elsewhere: the group coordinator cannot check it here
        md = self.transactions.get(transactional_id)
        if md is None or md.producer_id != producer_id:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if producer_epoch != md.producer_epoch:
            return ErrorCode.PRODUCER_FENCED
        tp = self._offsets_partition(group_id)
        if md.state is not TransactionState.ONGOING or tp not in md.partitions:
            return ErrorCode.INVALID_TXN_STATE
        return None

    # -- EndTxn ----------------------------------------------------------------------------------------
    async def end_transaction(
        self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool
    ) -> ErrorCode:
        """Decide (PrepareCommit/PrepareAbort, durable), write the markers, complete."""
        error = self.validate(transactional_id)
        if error is not None:
            return error
        target = TransactionState.PREPARE_COMMIT if commit else TransactionState.PREPARE_ABORT
        async with self._locks.hold(transactional_id):
            md = self.transactions.get(transactional_id)
            error = self._check_producer(md, producer_id, producer_epoch)
            if error is not None:
                return error
            assert md is not None
            if md.state.is_prepare:
                if md.state is target:
                    self._spawn_completion(transactional_id)
                    return ErrorCode.CONCURRENT_TRANSACTIONS
                return ErrorCode.INVALID_TXN_STATE
            if md.state in (TransactionState.COMPLETE_COMMIT, TransactionState.COMPLETE_ABORT):
                done = TransactionState.COMPLETE_COMMIT if commit else TransactionState.COMPLETE_ABORT
                return ErrorCode.NONE if md.state is done else ErrorCode.INVALID_TXN_STATE  # a retried EndTxn
            if md.state is not TransactionState.ONGOING:
                return ErrorCode.INVALID_TXN_STATE
            error = await self._persist(md.transition(target, self.now_ms()))
            if error != ErrorCode.NONE:
                return error
        await self._complete(transactional_id)
        return ErrorCode.NONE

    async def _abort(self, transactional_id: str, *, fence: bool, expected: TransactionMetadata) -> ErrorCode:
        """Abort an open transaction (re-init); ``fence`` bumps the epoch so the old producer's
        further requests are refused. Waits for the markers as EndTxn does."""
        error = await self._prepare_abort(transactional_id, fence=fence, expected=expected)
        if error != ErrorCode.NONE:
            return error
        await self._complete(transactional_id)
        return ErrorCode.NONE

    async def _prepare_abort(self, transactional_id: str, *, fence: bool, expected: TransactionMetadata) -> ErrorCode:
        """Write PrepareAbort for an open transaction (the outcome is then decided and durable);
        the markers are someone else's: :meth:`_complete` or :meth:`_spawn_completion`."""
        async with self._locks.hold(transactional_id):
            md = self.transactions.get(transactional_id)
            if md is not expected or md.state is not TransactionState.ONGOING:
                return ErrorCode.CONCURRENT_TRANSACTIONS
            # up to MAX_FENCE_EPOCH, as Kafka's prepareFenceProducerEpoch: a producer at
            # MAX_EPOCH must be fenced too (its markers at the bumped epoch refuse its writes);
            # only an epoch already at MAX_FENCE_EPOCH cannot be bumped (no producer holds it:
            # InitProducerId rotated the producer id past MAX_EPOCH), and is aborted as it is
            epoch = md.producer_epoch + 1 if fence and md.producer_epoch < MAX_FENCE_EPOCH else md.producer_epoch
            last = {"last_producer_id": md.producer_id, "last_producer_epoch": md.producer_epoch} if fence else {}
            return await self._persist(
                md.transition(TransactionState.PREPARE_ABORT, self.now_ms(), producer_epoch=epoch, **last)
            )

    async def _complete(self, transactional_id: str) -> None:
        """Have the markers of a prepared transaction written and the transaction completed;
        wait for that up to ``end_txn_wait_s`` (the task goes on in the background after)."""
        done = self._spawn_completion(transactional_id)
        if done is not None:
            with trio.move_on_after(self.end_txn_wait_s):
                await done.wait()

    def _in_charge(self, transactional_id: str, md: TransactionMetadata, coordinator_epoch: int) -> bool:
        """Whether this coordinator still owns ``md`` under ``coordinator_epoch`` (fencing)."""
        p = self.partition_for(transactional_id)
        return (
            p in self.owned
            and self.coordinator_epochs.get(p) == coordinator_epoch
            and self.transactions.get(transactional_id) is md
        )

    async def _deliver_markers(self, transactional_id: str) -> None:
        """Write the markers of a prepared transaction into every partition of it through their
        leaders (the groups' ``__consumer_offsets`` partitions too: there the marker settles the
        TxnOffsetCommit offsets), retrying with backoff until each is written, then write
        Complete*. Stops, leaving the transaction prepared, once another coordinator (or a newer
        epoch of this one) is in charge or a partition says a newer producer epoch or coordinator
        took over; whoever is in charge then completes it."""
        md = self.transactions.get(transactional_id)
        if md is None or not md.state.is_prepare:
            return
        commit = md.state is TransactionState.PREPARE_COMMIT
        result = ControlRecordType.COMMIT if commit else ControlRecordType.ABORT
        coordinator_epoch = self.coordinator_epochs.get(self.partition_for(transactional_id), 0)
        remaining = set(md.partitions)
        self._unmarked[transactional_id] = remaining  # DescribeTransactions lists what is left
        try:
            await self._write_markers(transactional_id, md, coordinator_epoch, result, remaining)
        finally:
            if self._unmarked.get(transactional_id) is remaining:
                del self._unmarked[transactional_id]

    async def _write_markers(
        self,
        transactional_id: str,
        md: TransactionMetadata,
        coordinator_epoch: int,
        result: ControlRecordType,
        remaining: set[TopicPartition],
    ) -> None:
        """The marker loop of :meth:`_deliver_markers`; ``remaining`` shrinks as partitions are done."""
        commit = result is ControlRecordType.COMMIT
        backoff = MARKER_RETRY_BACKOFF_S
        failures = 0
        while remaining:
            if not self._in_charge(transactional_id, md, coordinator_epoch):
                log.info("%r: no longer its coordinator (epoch %d); markers stop", transactional_id, coordinator_epoch)
                return
            written = await self.markers.write_markers(
                md.producer_id, md.producer_epoch, coordinator_epoch, result, sorted(remaining)
            )
            for tp, error in written.items():
                if error in _MARKER_DONE:
                    remaining.discard(tp)
                elif error in _MARKER_SUPERSEDED:
                    log.warning(
                        "%s marker of %r for %s refused with %s: superseded; markers stop",
                        result.name, transactional_id, tp, error.name,
                    )  # fmt: skip
                    return
            if remaining:
                failures += 1
                level = logging.WARNING if failures in (1, 10) or failures % 100 == 0 else logging.DEBUG
                log.log(
                    level,
                    "%s markers of %r not written yet to %s (attempt %d); retrying",
                    result.name, transactional_id, sorted(remaining), failures,
                )  # fmt: skip
                await trio.sleep(backoff)
                backoff = min(backoff * 2, MARKER_RETRY_BACKOFF_MAX_S)
        done = TransactionState.COMPLETE_COMMIT if commit else TransactionState.COMPLETE_ABORT
        async with self._locks.hold(transactional_id):
            if self._in_charge(transactional_id, md, coordinator_epoch):
                await self._persist(md.transition(done, self.now_ms(), partitions=set(), txn_start_ms=-1))

    # -- timeouts --------------------------------------------------------------------------------------
    async def abort_timed_out_transactions(self) -> int:
        """Abort (fencing the producer) every open transaction older than its timeout, and retry
        the completion of prepared ones. Returns how many were aborted.

        Each abort is decided here (PrepareAbort written) and its markers are left to its marker
        task, as Kafka's ``abortTimedOutTransactions`` hands them to the marker channel: waiting
        for them (up to ``end_txn_wait_s``) one transaction at a time would keep every later
        timed-out transaction open, and its producer able to commit it, for as long as the
        markers of the ones before cannot be written (a partition without a leader)."""
        now = self.now_ms()
        aborted = 0
        for tid, md in list(self.transactions.items()):
            if self.partition_for(tid) not in self.owned:
                continue
            if md.state.is_prepare:
                self._spawn_completion(tid)  # a marker task that stopped (or never started): again
            elif md.state is TransactionState.ONGOING and md.txn_start_ms + md.timeout_ms < now:
                log.info("aborting transaction of %r: open for more than %d ms", tid, md.timeout_ms)
                if await self._prepare_abort(tid, fence=True, expected=md) == ErrorCode.NONE:
                    self._spawn_completion(tid)
                    aborted += 1
        return aborted

    async def expire_transactional_ids(self) -> int:
        """Forget ids without an open transaction idle longer than ``transactional.id.expiration.ms``
        (a tombstone in the log; a producer coming back later gets a new producer id)."""
        now = self.now_ms()
        expired = 0
        for tid, md in list(self.transactions.items()):
            p = self.partition_for(tid)
            if p not in self.owned or not md.state.is_idle or md.last_update_ms + self.id_expiration_ms >= now:
                continue
            async with self._locks.hold(tid):
                if self.transactions.get(tid) is not md:
                    continue
                if await self.log.append(p, (txn_key(tid), None), now) == ErrorCode.NONE:
                    del self.transactions[tid]
                    expired += 1
        if expired:
            log.info("expired %d idle transactional ids", expired)
        return expired

    # -- tooling (KIP-664): ListTransactions, DescribeTransactions ----------------------------------
    def list_transactions(
        self,
        state_filters: Collection[str] = (),
        producer_id_filters: Collection[int] = (),
        duration_filter_ms: int = -1,
        transactional_id_pattern: str | None = None,
    ) -> ListTransactionsResult:
        """The ids of the ``__transaction_state`` partitions this broker leads, filtered (see
        :func:`.listing.list_transactions`); a client asks every broker and joins the answers.
        COORDINATOR_NOT_AVAILABLE before the coordinator runs, COORDINATOR_LOAD_IN_PROGRESS while
        any partition loads (the listing would miss its ids), as Kafka answers."""
        if not self.active:
            return ListTransactionsResult(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        if self.loading:
            return ListTransactionsResult(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
        owned = [md for tid, md in self.transactions.items() if self.partition_for(tid) in self.owned]
        return list_transactions(
            owned, state_filters, producer_id_filters, duration_filter_ms, self.now_ms(), transactional_id_pattern
        )

    def describe_transaction(self, transactional_id: str) -> TransactionDescription:
        """One id's state, as its coordinator knows it: NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS
        as for the other transactional requests, TRANSACTIONAL_ID_NOT_FOUND for an id it does
        not know (never used, or expired), INVALID_REQUEST for an empty id."""
        if not self.active:
            return TransactionDescription(transactional_id, ErrorCode.COORDINATOR_NOT_AVAILABLE)
        error = self.validate(transactional_id)
        if error is not None:
            return TransactionDescription(transactional_id, error)
        md = self.transactions.get(transactional_id)
        if md is None:
            return TransactionDescription(transactional_id, ErrorCode.TRANSACTIONAL_ID_NOT_FOUND)
        unmarked = self._unmarked.get(transactional_id) if md.state.is_prepare else None
        return describe_transaction(md, unmarked)

    # -- the produce path's check (ReplicaManager.verify_transaction) -------------------------------
    def verify_transaction(
        self, transactional_id: str | None, producer_id: int, producer_epoch: int, tp: TopicPartition
    ) -> ErrorCode:
        """May a client's transactional batch for ``tp`` be appended? NONE when ``tp`` is in the
        producer's ongoing transaction; INVALID_PRODUCER_EPOCH for an older epoch (the producer
        was fenced); INVALID_TXN_STATE otherwise, only when this broker coordinates the id and
        so knows the answer. Ids coordinated by another broker cannot be checked here and are
        accepted.

        While the id's ``__transaction_state`` partition is loading, or this broker does not
        know who leads it, the answer is not known yet: COORDINATOR_LOAD_IN_PROGRESS /
        COORDINATOR_NOT_AVAILABLE, which the produce path answers as a retriable error, as
        Kafka's verification does, instead of making the producer abort a healthy transaction.
        Not knowing the leader happens after a restart (the broker listens before it has
        registered, so the partition has no live leader) and on a fresh cluster: the topic is
        created by the first FindCoordinator or InitProducerId, possibly on another broker, and
        this broker has not looked at its leaders yet (the ownership check runs every
        ``OWNERSHIP_REFRESH_S``); the producer's first batch can arrive in that gap."""
        if not transactional_id:
            return ErrorCode.INVALID_TXN_STATE
        p = self.partition_for(transactional_id)
        if p not in self.owned:
            if p in self.remote:
                return ErrorCode.NONE
            if p in self.loading:
                return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
            return ErrorCode.COORDINATOR_NOT_AVAILABLE  # leaderless, or not seen since the topic appeared
        md = self.transactions.get(transactional_id)
        if md is None or md.producer_id != producer_id:
            return ErrorCode.INVALID_TXN_STATE
        if producer_epoch < md.producer_epoch:
            return ErrorCode.INVALID_PRODUCER_EPOCH
        if md.producer_epoch == producer_epoch and md.state is TransactionState.ONGOING and tp in md.partitions:
            return ErrorCode.NONE
        return ErrorCode.INVALID_TXN_STATE
