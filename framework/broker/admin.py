"""Topic administration: CreateTopics, DeleteTopics, CreatePartitions and auto-creation.

Validation follows Kafka's ``AdminManager``/``Topic`` rules and error codes; every change is one
compare-and-set transaction on the metadata store (the assignment key must be absent to create,
at the version read to grow), so two brokers or tools racing on one topic cannot both win. After a
successful write the :class:`~odradek.broker.metadata_cache.MetadataCache` is refreshed at once,
so the topic is usable when the call returns.
"""

from __future__ import annotations

import logging
import random
import re
import uuid
from collections.abc import Iterable, Mapping, Sequence

from ..config import Config, TopicConfig
from ..errors import (
    ErrorCode,
    InvalidConfig,
    InvalidPartitions,
    InvalidReplicationFactor,
    InvalidRequest,
    InvalidTopic,
    KafkaError,
    KafkaStorageError,
    TopicAlreadyExists,
    UnknownTopicOrPartition,
)
from ..interfaces import ABSENT, Check, Delete, MetadataConflict, MetadataStore, Put
from ..sessions import MetadataStoreError, MetadataTxnTooLarge
from .api import CreatableTopic, CreatePartitionsTopic, CreateTopicResult, TopicResult
from .configs import ConfigManager
from .metadata_cache import (
    INTERNAL_TOPICS,
    MetadataCache,
    PartitionState,
    config_key,
    encode,
    partition_state_key,
    topic_key,
)
from .mutation_quota import UNBOUNDED, ControllerMutationQuota

log = logging.getLogger(__name__)

MAX_NAME_LENGTH = 249
_LEGAL = re.compile(r"[a-zA-Z0-9._-]+")  # matched whole (fullmatch: "$" would allow a final newline)


def validate_topic_name(name: str) -> None:
    """Kafka's ``Topic.validate``: non-empty, not '.'/'..', <= 249 chars of [a-zA-Z0-9._-]."""
    if not name:
        raise InvalidTopic("topic name is illegal, it can't be empty")
    if name in (".", ".."):
        raise InvalidTopic(f"topic name cannot be {name!r}")
    if len(name) > MAX_NAME_LENGTH:
        raise InvalidTopic(f"topic name is longer than {MAX_NAME_LENGTH} characters: {len(name)}")
    if not _LEGAL.fullmatch(name):
        raise InvalidTopic(f"topic name {name!r} is illegal: only ASCII alphanumerics, '.', '_' and '-' are allowed")


def collision_name(name: str) -> str:
    """Metric names replace '.' with '_', so Kafka refuses topics differing only in those."""
    return name.replace(".", "_")


def assign_replicas(
    brokers: Sequence[int], num_partitions: int, replication_factor: int, first: int = 0
) -> list[list[int]]:
    """Kafka's rack-unaware assignment: leaders round-robin from a random start, followers
    shifted so that replicas spread evenly. ``first`` is the first new partition's index."""
    n = len(brokers)
    ids = sorted(brokers)
    start = random.randrange(n)
    shift = random.randrange(n)
    out: list[list[int]] = []
    for i in range(num_partitions):
        p = first + i
        if p > 0 and p % n == 0:
            shift += 1
        lead = (p + start) % n
        replicas = [ids[lead]]
        for j in range(replication_factor - 1):
            replicas.append(ids[(lead + 1 + (shift + j) % (n - 1)) % n])
        out.append(replicas)
    return out


#: the most partitions one CreateTopics or CreatePartitions request may create, as in Kafka's
#: controller (ReplicationControlManager.MAX_PARTITIONS_PER_BATCH): the whole request is refused with
#: POLICY_VIOLATION above it. Without a bound a 49-byte request asking for 2**31-1 partitions
#: would have the broker build that many assignments in memory before anything else could run.
MAX_PARTITIONS_PER_REQUEST = 10_000


def _too_many_partitions(total: int) -> str:
    """Kafka's message for the bound, with the figures."""
    return (
        f"Excessively large number of partitions per request: {total} new partitions, "
        f"at most {MAX_PARTITIONS_PER_REQUEST}"
    )


#: what Kafka answers (INVALID_REQUEST) for a topic named twice in one CreateTopics, DeleteTopics or
#: CreatePartitions request: neither entry is applied, so the answer cannot contradict the result
DUPLICATE_TOPIC = "duplicate topic name in the request"


#: KRaft's metadata log, which Kafka refuses to create as a topic (INVALID_REQUEST, KafkaApis and
#: ControllerApis): a tool or a cluster migrated from KRaft must not find it as an ordinary topic
CLUSTER_METADATA_TOPIC = "__cluster_metadata"
CLUSTER_METADATA_PROHIBITED = f"Creation of internal topic {CLUSTER_METADATA_TOPIC} is prohibited."


def _repeated(names: Iterable[str]) -> set[str]:
    """The names that appear more than once."""
    seen: set[str] = set()
    repeated: set[str] = set()
    for name in names:
        (repeated if name in seen else seen).add(name)
    return repeated


class AdminManager:
    """Creates, deletes and grows topics through the metadata store."""

    def __init__(self, config: Config, store: MetadataStore, cache: MetadataCache, describer: ConfigManager) -> None:
        self.config = config
        self.store = store
        self.cache = cache
        self.describer = describer

    # -- CreateTopics ----------------------------------------------------------------------------
    async def create_topics(
        self, topics: Sequence[CreatableTopic], validate_only: bool, quota: ControllerMutationQuota = UNBOUNDED
    ) -> dict[str, CreateTopicResult]:
        """Create each topic that passes its checks; ``quota`` (the client's
        ``controller_mutation_rate``) is charged a topic's partitions just before it is written."""
        results: dict[str, CreateTopicResult] = {}
        repeated = _repeated(t.name for t in topics)
        default = int(self.config["num.partitions"])
        total = sum(
            len(t.assignments) if t.assignments else (default if t.num_partitions == -1 else max(t.num_partitions, 0))
            for t in topics
            if t.name not in repeated and t.name != CLUSTER_METADATA_TOPIC
        )
        for t in topics:
            if t.name == CLUSTER_METADATA_TOPIC:  # Kafka's first check, before a repeated name
                results[t.name] = CreateTopicResult(ErrorCode.INVALID_REQUEST, CLUSTER_METADATA_PROHIBITED)
                continue
            if t.name in repeated:
                results[t.name] = CreateTopicResult(ErrorCode.INVALID_REQUEST, DUPLICATE_TOPIC)
                continue
            if total > MAX_PARTITIONS_PER_REQUEST:
                results[t.name] = CreateTopicResult(ErrorCode.POLICY_VIOLATION, _too_many_partitions(total))
                continue
            try:
                results[t.name] = await self._create_topic(t, validate_only, quota)
            except KafkaError as exc:
                results[t.name] = CreateTopicResult(exc.code, str(exc))
            except MetadataStoreError as exc:
                results[t.name] = CreateTopicResult(ErrorCode.UNKNOWN_SERVER_ERROR, _refused("creating", t.name, exc))
        return results

    async def _create_topic(
        self, t: CreatableTopic, validate_only: bool, quota: ControllerMutationQuota
    ) -> CreateTopicResult:
        validate_topic_name(t.name)
        if self.cache.contains_topic(t.name):
            raise TopicAlreadyExists(f"topic {t.name!r} already exists")
        clash = [n for n in self.cache.topics if collision_name(n) == collision_name(t.name)]
        if clash:
            raise InvalidTopic(f"topic {t.name!r} collides with existing topic {clash[0]!r} ('.' and '_' clash)")
        if ("." in t.name or "_" in t.name) and t.name not in INTERNAL_TOPICS:
            log.warning(
                "topic %r has a period or underscore: it could collide with another topic's metric names", t.name
            )
        overrides = self._config_overrides(t.configs)
        config = TopicConfig.build(self.config, overrides)
        assignment = self._assignment_for(t)
        # its assignment, every partition's state and its config (or a stale config's deletion)
        self._check_txn_room(t.name, len(assignment) + 2, len(assignment))
        if validate_only:
            return self._created(t.name, assignment, overrides, config, "")
        quota.record(len(assignment))
        live = set(self.cache.live_broker_ids())
        topic_id = uuid.uuid4().hex
        ops: list[Put | Delete] = [
            Put(
                topic_key(t.name),
                encode({"version": 3, "topic_id": topic_id, "partitions": _json_assignment(assignment)}),
            )
        ]
        for p, replicas in enumerate(assignment):
            ops.append(Put(partition_state_key(t.name, p), _initial_state(replicas, live).to_json()))
        if overrides:
            ops.append(Put(config_key(t.name), encode({"version": 1, "config": overrides})))
        elif await self.store.get(config_key(t.name)) is not None:
            ops.append(Delete(config_key(t.name)))  # left behind by an interrupted delete
        try:
            await self.store.txn([Check(topic_key(t.name), ABSENT)], ops)
        except MetadataConflict:
            raise TopicAlreadyExists(f"topic {t.name!r} already exists") from None
        except MetadataTxnTooLarge as too_large:
            raise InvalidPartitions(
                f"topic {t.name!r} with {len(assignment)} partitions is too large: {too_large}"
            ) from None
        log.info(
            "created topic %s with %d partitions, replication factor %d", t.name, len(assignment), len(assignment[0])
        )
        await self.cache.refresh_topic(t.name)
        failed = {
            tp: exc
            for tp, exc in self.cache.storage_failures.items()
            if tp.topic == t.name and tp.partition < len(assignment)
        }
        if failed:
            await self._undo_create(t.name, ops)
            tp, exc = next(iter(failed.items()))
            raise KafkaStorageError(f"topic {t.name!r} not created: the log of {tp} cannot be created: {exc}")
        return self._created(t.name, assignment, overrides, config, topic_id)

    async def _undo_create(self, name: str, ops: Sequence[Put | Delete]) -> None:
        """Take back a topic whose logs could not be created here (a full disk), so that the
        client's error is the whole story: CreateTopics can be retried once space is freed."""
        keys = [op.key for op in ops if isinstance(op, Put)]
        try:
            await self.store.txn([], [Delete(k) for k in reversed(keys)])
        except Exception as exc:  # the store cannot be written either: the topic stays, unhosted
            log.error("topic %s: its logs cannot be created and taking it back failed too: %s", name, exc)
        else:
            log.info("topic %s taken back: its logs cannot be created", name)
        await self.cache.refresh_topic(name)
        for tp in [tp for tp in self.cache.storage_failures if tp.topic == name]:
            self.cache.storage_failures.pop(tp, None)

    def _created(
        self, name: str, assignment: list[list[int]], overrides: dict[str, str], config: TopicConfig, topic_id: str
    ) -> CreateTopicResult:
        return CreateTopicResult(
            ErrorCode.NONE,
            None,
            len(assignment),
            len(assignment[0]),
            tuple(self.describer.topic_entries(config, overrides, include_synonyms=False, include_documentation=False)),
            topic_id,
        )

    @staticmethod
    def _config_overrides(configs: Mapping[str, str | None]) -> dict[str, str]:
        out: dict[str, str] = {}
        for k, v in configs.items():
            if v is None:
                raise InvalidConfig(f"null value not supported for topic config {k!r}")
            out[k] = v
        return out

    def _assignment_for(self, t: CreatableTopic) -> list[list[int]]:
        live = self.cache.live_broker_ids()
        if t.assignments:
            if t.num_partitions != -1 or t.replication_factor != -1:
                raise InvalidRequest("both a replica assignment and numPartitions/replicationFactor were given")
            if t.assigned_twice:  # Kafka's ReplicationControlManager.createTopic
                raise KafkaError(
                    f"Found multiple manual partition assignments for partition {t.assigned_twice[0]}",
                    code=ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                )
            return _check_assignment(t.assignments, live, expected_first=0, expected_rf=None)
        num = int(self.config["num.partitions"]) if t.num_partitions == -1 else t.num_partitions
        rf = int(self.config["default.replication.factor"]) if t.replication_factor == -1 else t.replication_factor
        if num <= 0:
            raise InvalidPartitions(f"number of partitions must be larger than 0, got {num}")
        if rf <= 0:
            raise InvalidReplicationFactor(f"replication factor must be larger than 0, got {rf}")
        if rf > len(live):
            raise InvalidReplicationFactor(f"replication factor {rf} is larger than the {len(live)} available brokers")
        return assign_replicas(live, num, rf)

    async def auto_create(self, names: Sequence[str]) -> dict[str, CreateTopicResult]:
        """Metadata's auto-creation with the broker defaults (races with another creator are fine).
        ``__cluster_metadata``, which cannot be created, stays UNKNOWN_TOPIC_OR_PARTITION, the
        answer for a topic that does not exist."""
        results = await self.create_topics([CreatableTopic(n) for n in names], validate_only=False)
        out = {
            n: (CreateTopicResult(ErrorCode.NONE) if r.error is ErrorCode.TOPIC_ALREADY_EXISTS else r)
            for n, r in results.items()
        }
        if CLUSTER_METADATA_TOPIC in out:
            out[CLUSTER_METADATA_TOPIC] = CreateTopicResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        return out

    # -- DeleteTopics ----------------------------------------------------------------------------
    async def delete_topics(
        self, names: Sequence[str], quota: ControllerMutationQuota = UNBOUNDED
    ) -> dict[str, TopicResult]:
        results: dict[str, TopicResult] = {}
        repeated = _repeated(names)
        for name in names:
            if name in repeated:
                results[name] = TopicResult(ErrorCode.INVALID_REQUEST, DUPLICATE_TOPIC)
                continue
            try:
                await self._delete_topic(name, quota)
                results[name] = TopicResult(ErrorCode.NONE)
            except KafkaError as exc:
                results[name] = TopicResult(exc.code, str(exc))
            except MetadataStoreError as exc:
                results[name] = TopicResult(ErrorCode.UNKNOWN_SERVER_ERROR, _refused("deleting", name, exc))
        return results

    async def _delete_topic(self, name: str, quota: ControllerMutationQuota) -> None:
        if not self.config["delete.topic.enable"]:
            raise KafkaError(
                "topic deletion is disabled (delete.topic.enable=false)", code=ErrorCode.TOPIC_DELETION_DISABLED
            )
        if name in INTERNAL_TOPICS:
            raise InvalidTopic(f"internal topic {name!r} cannot be deleted")
        topic = self.cache.topics.get(name)
        if topic is None:
            raise UnknownTopicOrPartition(f"topic {name!r} does not exist")
        quota.record(topic.num_partitions)
        children, _ = await self.store.list(topic_key(name) + "/")
        ops: list[Put | Delete] = [Delete(k) for k in children]
        ops.append(Delete(topic_key(name)))
        if await self.store.get(config_key(name)) is not None:
            ops.append(Delete(config_key(name)))
        limit = self._max_txn_ops()
        try:
            if limit is None or len(ops) <= limit:
                await self.store.txn([Check(topic_key(name), topic.version)], ops)
            else:
                await self._delete_in_steps(name, topic.version, ops[len(children) :], children, limit)
        except MetadataConflict:
            # changed under us (deleted or grown elsewhere): decide again on fresh state
            await self.cache.refresh_topic(name)
            if not self.cache.contains_topic(name):
                raise UnknownTopicOrPartition(f"topic {name!r} does not exist") from None
            raise KafkaError(f"topic {name!r} changed concurrently; retry", code=ErrorCode.REQUEST_TIMED_OUT) from None
        log.info("deleted topic %s", name)
        await self.cache.refresh_topic(name)

    async def _delete_in_steps(
        self, name: str, version: int, topic_ops: list[Put | Delete], children: Iterable[str], limit: int
    ) -> None:
        """Delete a topic too large for one transaction of the store (created before etcd's
        --max-txn-ops was lowered): its assignment and config first, in one transaction, so every
        reader sees it gone at once (a partition state without an assignment is nobody's), then its
        partitions' keys ``limit`` at a time, each only while no topic of that name exists again
        (a topic created meanwhile writes those keys anew: none of its keys is deleted). Keys left
        by a failure in between are read by nothing and go with the next deletion of the name."""
        await self.store.txn([Check(topic_key(name), version)], topic_ops)
        rest = list(children)
        for start in range(0, len(rest), limit):
            chunk = rest[start : start + limit]
            try:
                await self.store.txn([Check(topic_key(name), ABSENT)], [Delete(k) for k in chunk])
            except MetadataConflict:
                log.info("topic %s was created again while its old partition keys were deleted; leaving them", name)
                return

    def _max_txn_ops(self) -> int | None:
        """The most writes the metadata store takes in one transaction (etcd's --max-txn-ops), or
        None for no limit (ZooKeeper's multi, the local store)."""
        limit = getattr(self.store, "max_txn_ops", None)
        return limit if isinstance(limit, int) and limit > 0 else None

    def _check_txn_room(self, name: str, writes: int, partitions: int) -> None:
        """Refuse a topic change that does not fit one transaction of the store before anything
        is written: a topic's creation (or growth) writes every partition's state with its
        assignment atomically, so a reader never sees half a topic. Without this check etcd
        refused the transaction and the client heard of an unexpected server error."""
        limit = self._max_txn_ops()
        if limit is not None and writes > limit:
            raise InvalidPartitions(
                f"topic {name!r} with {partitions} partitions needs {writes} writes in one metadata "
                f"transaction, and the metadata store takes at most {limit}: on etcd, raise the servers' "
                "--max-txn-ops and the brokers' etcd.max.txn.ops together"
            )

    # -- CreatePartitions ------------------------------------------------------------------------
    async def create_partitions(
        self,
        topics: Sequence[CreatePartitionsTopic],
        validate_only: bool,
        quota: ControllerMutationQuota = UNBOUNDED,
    ) -> dict[str, TopicResult]:
        results: dict[str, TopicResult] = {}
        repeated = _repeated(t.name for t in topics)
        total = 0
        for t in topics:
            topic = self.cache.topics.get(t.name)
            if t.name not in repeated and topic is not None:
                total += max(t.count - topic.num_partitions, 0)
        for t in topics:
            if t.name in repeated:
                results[t.name] = TopicResult(ErrorCode.INVALID_REQUEST, DUPLICATE_TOPIC)
                continue
            if total > MAX_PARTITIONS_PER_REQUEST:
                results[t.name] = TopicResult(ErrorCode.POLICY_VIOLATION, _too_many_partitions(total))
                continue
            try:
                await self._create_partitions(t, validate_only, quota)
                results[t.name] = TopicResult(ErrorCode.NONE)
            except KafkaError as exc:
                results[t.name] = TopicResult(exc.code, str(exc))
            except MetadataStoreError as exc:
                results[t.name] = TopicResult(ErrorCode.UNKNOWN_SERVER_ERROR, _refused("growing", t.name, exc))
        return results

    async def _create_partitions(
        self, t: CreatePartitionsTopic, validate_only: bool, quota: ControllerMutationQuota
    ) -> None:
        topic = self.cache.topics.get(t.name)
        if topic is None:
            raise UnknownTopicOrPartition(f"topic {t.name!r} does not exist")
        if topic.reassigning:
            # the assignment's replication factor is unsettled while replicas move (Kafka's
            # controller refuses the same)
            raise KafkaError(
                f"topic {t.name!r} has partition reassignments in progress: {sorted(topic.reassigning)}",
                code=ErrorCode.REASSIGNMENT_IN_PROGRESS,
            )
        current = topic.num_partitions
        if t.count < current:
            raise InvalidPartitions(
                f"topic currently has {current} partitions, which is higher than the requested {t.count}"
            )
        if t.count == current:
            raise InvalidPartitions(f"topic already has {current} partitions")
        live = self.cache.live_broker_ids()
        new = t.count - current
        if t.assignments is not None:
            if len(t.assignments) != new:
                raise KafkaError(
                    f"{len(t.assignments)} assignments given for {new} new partitions",
                    code=ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                )
            added = _check_assignment(
                {current + i: a for i, a in enumerate(t.assignments)}, live, current, topic.replication_factor
            )
        else:
            if topic.replication_factor > len(live):
                raise InvalidReplicationFactor(
                    f"replication factor {topic.replication_factor} is larger than the {len(live)} available brokers"
                )
            added = assign_replicas(live, new, topic.replication_factor, first=current)
        self._check_txn_room(t.name, len(added) + 1, t.count)
        if validate_only:
            return
        quota.record(len(added))
        assignment = {p: list(r) for p, r in topic.assignment.items()}
        live_set = set(live)
        ops: list[Put | Delete] = []
        for i, replicas in enumerate(added):
            assignment[current + i] = replicas
            ops.append(Put(partition_state_key(t.name, current + i), _initial_state(replicas, live_set).to_json()))
        doc = encode({"version": 3, "topic_id": topic.topic_id, "partitions": _json_assignment_map(assignment)})
        try:
            await self.store.txn([Check(topic_key(t.name), topic.version)], [Put(topic_key(t.name), doc), *ops])
        except MetadataTxnTooLarge as exc:
            raise InvalidPartitions(
                f"adding {len(added)} partitions to topic {t.name!r} at once is too large: {exc}"
            ) from None
        except MetadataConflict:
            await self.cache.refresh_topic(t.name)
            raise KafkaError(
                f"topic {t.name!r} changed concurrently; retry", code=ErrorCode.REQUEST_TIMED_OUT
            ) from None
        log.info("topic %s now has %d partitions", t.name, t.count)
        await self.cache.refresh_topic(t.name)


def _refused(doing: str, name: str, exc: MetadataStoreError) -> str:
    """The answer (and one ERROR line) for a topic change the metadata store refused for a reason
    of its own (etcd's limit on a transaction's size): that topic fails, the request's others
    go on. Nothing of the change was written (each is one transaction), unless a deletion in
    steps failed after its first: the topic is gone then, and some of its keys, read by nothing,
    are left for the next deletion of the name."""
    message = f"{doing} topic {name!r} failed: the metadata store refused it: {exc}"
    log.error("%s", message)
    return message


def _initial_state(replicas: Sequence[int], live: set[int]) -> PartitionState:
    in_sync = [r for r in replicas if r in live]
    leader = in_sync[0] if in_sync else -1
    return PartitionState(leader, 0, tuple(in_sync), 0)


def _json_assignment(assignment: Sequence[Sequence[int]]) -> dict[str, list[int]]:
    return {str(p): list(r) for p, r in enumerate(assignment)}


def _json_assignment_map(assignment: Mapping[int, Sequence[int]]) -> dict[str, list[int]]:
    return {str(p): list(r) for p, r in sorted(assignment.items())}


def _check_assignment(
    assignments: Mapping[int, Sequence[int]], live: Sequence[int], expected_first: int, expected_rf: int | None
) -> list[list[int]]:
    """Partitions numbered consecutively from ``expected_first``, each with distinct live brokers
    and one replication factor for all."""
    code = ErrorCode.INVALID_REPLICA_ASSIGNMENT
    partitions = sorted(assignments)
    if partitions != list(range(expected_first, expected_first + len(partitions))):
        raise KafkaError(f"partitions must be numbered consecutively from {expected_first}: {partitions}", code=code)
    out = []
    rf = expected_rf
    for p in partitions:
        replicas = [int(r) for r in assignments[p]]
        if not replicas:
            raise KafkaError(f"partition {p} has an empty replica list", code=code)
        if len(set(replicas)) != len(replicas):
            raise KafkaError(f"partition {p} lists a broker twice: {replicas}", code=code)
        unknown = [r for r in replicas if r not in live]
        if unknown:
            raise KafkaError(f"partition {p} names unknown brokers {unknown}", code=code)
        if rf is None:
            rf = len(replicas)
        elif len(replicas) != rf:
            raise KafkaError(f"partition {p} has {len(replicas)} replicas, others have {rf}", code=code)
        out.append(replicas)
    return out
