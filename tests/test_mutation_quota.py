"""Controller mutation quotas (KIP-599): the token bucket and the strict and permissive quotas on
a fake clock, the admin manager charging partitions only for topics it writes, and a broker
subprocess enforcing ``controller_mutation_rate`` on odradek's admin client (strict: CreateTopics
v7, DeleteTopics v5, CreatePartitions v3), confluent-kafka's AdminClient (librdkafka's older
versions: permissive, throttled) and kafka-python's.

Integration assertions check what was refused, accepted and reported, never how long anything
took: a retry loop waits for the bucket to refill.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from broker_harness import running_broker
from confluent_kafka.admin import AdminClient, NewPartitions
from confluent_kafka.admin import NewTopic as ConfluentNewTopic
from kafka.admin import KafkaAdminClient
from kafka.admin import NewTopic as KafkaPythonNewTopic

from odradek.broker.api import CreatableTopic
from odradek.broker.mutation_quota import (
    UNBOUNDED,
    ControllerMutationQuotaManager,
    ThrottlingQuotaExceeded,
    TokenBucket,
)
from odradek.broker.quota_configs import CONTROLLER_MUTATION_RATE, DEFAULT, ClientQuotaConfigs, QuotaEntity
from odradek.client import Admin, ClientQuotaAlteration, KafkaError, NewTopic
from odradek.errors import ErrorCode
from odradek.testing import BrokerProcess, start_broker, unique_topic


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _manager(rate: float, clock: _Clock, *, entity: QuotaEntity | None = None) -> ControllerMutationQuotaManager:
    configs = ClientQuotaConfigs(store=None)  # type: ignore[arg-type]  # set_entity needs no store
    configs.set_entity(entity or QuotaEntity(None, "admin"), {CONTROLLER_MUTATION_RATE: rate})
    # a bucket of (2 - 1) * 1 s of the quota
    return ControllerMutationQuotaManager(configs, samples=2, window_s=1.0, clock=clock)


# -- the bucket and the quotas ------------------------------------------------------------------------


def test_the_bucket_starts_full_refills_at_the_rate_and_caps_at_the_burst() -> None:
    bucket = TokenBucket(rate=2.0, burst=4.0, now_s=0.0)
    assert bucket.refill(0.0) == 4.0
    bucket.take(10, 0.0)
    assert bucket.tokens == -6.0
    assert bucket.throttle_ms() == 3000  # 6 tokens at 2 a second
    assert bucket.refill(1.5) == -3.0
    assert bucket.refill(100.0) == 4.0  # never more than the burst
    assert bucket.throttle_ms() == 0
    bucket.reconfigure(1.0, 1.0, 100.0)
    assert bucket.tokens == 1.0 and bucket.rate == 1.0


def test_a_strict_quota_accepts_the_topic_that_empties_the_bucket_then_refuses() -> None:
    clock = _Clock()
    manager = _manager(2.0, clock)
    quota = manager.new_quota("ANONYMOUS", "admin", strict=True)
    quota.record(5)  # the bucket held 2: accepted, 3 below zero
    with pytest.raises(ThrottlingQuotaExceeded) as refused:
        quota.record(1)
    assert refused.value.code == ErrorCode.THROTTLING_QUOTA_EXCEEDED
    assert refused.value.throttle_ms == 1500
    assert str(refused.value) == "The throttling quota has been exceeded."
    clock.now += 0.5  # the throttle counts from when it was computed
    assert quota.finish() == 1000
    sample = manager.samples_for_metrics()[0]
    assert (sample.mutations, sample.throttled, sample.throttle_ms_total) == (5, 1, 1000)
    # once refilled to zero, the next request's topic is accepted again
    clock.now += 1.0
    manager.new_quota("ANONYMOUS", "admin", strict=True).record(1)


def test_a_strict_quota_that_was_not_exceeded_throttles_nothing() -> None:
    clock = _Clock()
    quota = _manager(2.0, clock).new_quota("ANONYMOUS", "admin", strict=True)
    quota.record(5)  # takes the bucket below zero, but nothing was refused
    assert quota.finish() == 0


def test_a_permissive_quota_accepts_everything_and_throttles_the_request() -> None:
    clock = _Clock()
    manager = _manager(2.0, clock)
    quota = manager.new_quota("ANONYMOUS", "admin", strict=False)
    quota.record(3)
    quota.record(3)
    assert quota.throttle_time_ms() == 2000  # 4 below zero at 2 a second
    assert quota.finish() == 2000
    assert manager.samples_for_metrics()[0].mutations == 6


def test_clients_without_a_quota_are_unbounded_and_a_default_quota_is_per_client() -> None:
    clock = _Clock()
    manager = _manager(1.0, clock)
    assert manager.new_quota("ANONYMOUS", "someone-else", strict=True) is UNBOUNDED
    UNBOUNDED.record(1000)
    assert UNBOUNDED.finish() == 0
    per_client = _manager(1.0, clock, entity=QuotaEntity(None, DEFAULT))
    per_client.new_quota("ANONYMOUS", "a", strict=True).record(5)
    per_client.new_quota("ANONYMOUS", "b", strict=True).record(1)  # b's bucket is its own
    with pytest.raises(ThrottlingQuotaExceeded):
        per_client.new_quota("ANONYMOUS", "a", strict=True).record(1)


def test_a_changed_quota_applies_to_the_next_request() -> None:
    clock = _Clock()
    manager = _manager(1.0, clock)
    manager.new_quota("ANONYMOUS", "admin", strict=True).record(3)
    manager.configs.set_entity(QuotaEntity(None, "admin"), {CONTROLLER_MUTATION_RATE: 100.0})
    quota = manager.new_quota("ANONYMOUS", "admin", strict=True)  # the new rate from now on
    clock.now += 0.1  # 10 tokens at the new rate: back above zero
    quota.record(1)
    assert manager.sensors[next(iter(manager.sensors))].bucket.rate == 100.0


async def test_the_admin_manager_charges_written_topics_only(tmp_path: Path) -> None:
    """validate_only, a topic refused for another reason, and a refused topic take no tokens."""
    async with running_broker(tmp_path) as core:
        manager = _manager(1.0, _Clock())  # a bucket of one partition
        quota = manager.new_quota("ANONYMOUS", "admin", strict=True)
        results = await core.create_topics([CreatableTopic("vo", 5, 1)], 1000, True, quota)
        assert results["vo"].error == ErrorCode.NONE
        results = await core.create_topics([CreatableTopic("bad name!", 5, 1)], 1000, False, quota)
        assert results["bad name!"].error == ErrorCode.INVALID_TOPIC_EXCEPTION
        two = [CreatableTopic("t1", 3, 1), CreatableTopic("t2", 1, 1)]
        results = await core.create_topics(two, 1000, False, quota)
        assert results["t1"].error == ErrorCode.NONE
        assert results["t2"].error == ErrorCode.THROTTLING_QUOTA_EXCEEDED
        assert results["t2"].error_message == "The throttling quota has been exceeded."
        assert core.metadata_cache.contains_topic("t1") and not core.metadata_cache.contains_topic("t2")
        refused = await core.delete_topics(["t1"], 1000, quota)
        assert refused["t1"].error == ErrorCode.THROTTLING_QUOTA_EXCEEDED
        assert core.metadata_cache.contains_topic("t1")
        assert manager.samples_for_metrics()[0].mutations == 3
        # Metadata's auto-creation and the broker's own topics are not held to any quota
        assert (await core.create_topics([CreatableTopic("t3", 9, 1)], 1000, False))["t3"].error == ErrorCode.NONE


# -- a broker subprocess and real clients --------------------------------------------------------------

TIMEOUT_S = 60


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    # quota.window.num=2: a bucket holds one second of the quota
    with start_broker(
        tmp_path_factory.mktemp("mutation-quota"), {"quota.window.num": 2, "metrics.prometheus.listener": "127.0.0.1:0"}
    ) as broker:
        yield broker
        problems = broker.log_problems()
        assert not problems, "\n".join(problems)


def _set_rate(broker: BrokerProcess, client_id: str, rate: float) -> None:
    with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
        entity = (("client-id", client_id),)
        assert admin.alter_client_quotas([ClientQuotaAlteration(entity, {CONTROLLER_MUTATION_RATE: rate})]) == {
            entity: None
        }


def _until_accepted(call: Any) -> dict[str, KafkaError | None]:
    """Repeat a mutation refused for the quota until it is accepted (the bucket refills)."""
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        results: dict[str, KafkaError | None] = call()
        refused = [e for e in results.values() if e is not None and e.code == ErrorCode.THROTTLING_QUOTA_EXCEEDED]
        if not refused or time.monotonic() > deadline:
            return results
        time.sleep(0.2)


@pytest.mark.integration
def test_odradek_admin_over_its_rate_is_refused_then_accepted(broker: BrokerProcess) -> None:
    client_id = unique_topic("mutator")
    _set_rate(broker, client_id, 1.0)
    first, second = unique_topic("mq"), unique_topic("mq")
    with Admin({"bootstrap.servers": broker.bootstrap, "client.id": client_id}) as admin:
        # the bucket holds 1 partition: a 4-partition topic is accepted and leaves it 3 below zero
        assert admin.create_topics([NewTopic(first, 4, 1)]) == {first: None}
        refused = admin.create_topics([NewTopic(second, 1, 1)])[second]
        assert isinstance(refused, KafkaError) and refused.code == ErrorCode.THROTTLING_QUOTA_EXCEEDED
        assert second not in admin.list_topics()
        # DeleteTopics and CreatePartitions are held to the same bucket
        assert _until_accepted(lambda: admin.create_topics([NewTopic(second, 1, 1)])) == {second: None}
        assert _until_accepted(lambda: admin.create_partitions({first: 8})) == {first: None}
        refused = admin.delete_topics([second])[second]
        assert isinstance(refused, KafkaError) and refused.code == ErrorCode.THROTTLING_QUOTA_EXCEEDED
        assert _until_accepted(lambda: admin.delete_topics([second])) == {second: None}
        assert _until_accepted(lambda: admin.delete_topics([first])) == {first: None}
        # validate_only is free, however large
        assert _until_accepted(lambda: admin.create_topics([NewTopic(unique_topic("mq"), 50, 1)], validate_only=True))
    metrics = broker.metrics()
    charged = [
        v for (name, labels), v in metrics.items() if name == "kafka_server_controller_mutation_partitions_total"
    ]
    assert charged and max(charged) >= 4 + 1 + 4 + 1 + 4


@pytest.mark.integration
def test_a_client_without_a_quota_is_not_limited(broker: BrokerProcess) -> None:
    _set_rate(broker, unique_topic("someone-else"), 1.0)
    topics = [unique_topic("free") for _ in range(3)]
    with Admin({"bootstrap.servers": broker.bootstrap, "client.id": unique_topic("free")}) as admin:
        assert admin.create_topics([NewTopic(t, 10, 1) for t in topics]) == dict.fromkeys(topics)
        assert admin.delete_topics(topics) == dict.fromkeys(topics)


@pytest.mark.integration
def test_confluent_admin_client_is_throttled_not_refused(broker: BrokerProcess) -> None:
    """librdkafka sends CreateTopics below v6 and CreatePartitions below v3: the permissive quota
    accepts every topic and throttles the client, which ``throttle_cb`` reports."""
    client_id = unique_topic("confluent-mutator")
    _set_rate(broker, client_id, 1.0)
    throttles: list[float] = []
    admin = AdminClient(
        {
            "bootstrap.servers": broker.bootstrap,
            "client.id": client_id,
            "throttle_cb": lambda event: throttles.append(event.throttle_time),
        }
    )
    names = [unique_topic("cq") for _ in range(2)]
    for future in admin.create_topics([ConfluentNewTopic(n, 3, 1) for n in names]).values():
        future.result(timeout=TIMEOUT_S)  # both accepted, 5 below zero
    admin.poll(1.0)  # serves the throttle callback
    assert throttles and max(throttles) > 0, throttles
    for future in admin.create_partitions([NewPartitions(names[0], 4)]).values():
        future.result(timeout=TIMEOUT_S)
    for future in admin.delete_topics(names).values():
        future.result(timeout=TIMEOUT_S)


@pytest.mark.integration
def test_kafka_python_admin_over_its_rate_is_refused(broker: BrokerProcess) -> None:
    """kafka-python sends CreateTopics v6+: the strict quota refuses the topic that comes while the
    bucket is below zero, with Kafka's error."""
    client_id = unique_topic("kp-mutator")
    _set_rate(broker, client_id, 1.0)
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, client_id=client_id)
    try:
        first, second = unique_topic("kq"), unique_topic("kq")
        admin.create_topics([KafkaPythonNewTopic(first, 4, 1)])
        answer = admin.create_topics([KafkaPythonNewTopic(second, 1, 1)], raise_errors=False)
        (topic,) = answer["topics"]
        assert topic["error_code"] == ErrorCode.THROTTLING_QUOTA_EXCEEDED, answer
        assert topic["error_message"] == "The throttling quota has been exceeded."
    finally:
        admin.close()
