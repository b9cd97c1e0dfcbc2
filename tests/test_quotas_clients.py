"""Client quotas against a broker subprocess: KIP-546 over the wire (odradek's admin client,
confluent-kafka's AdminClient where it has the calls), ``odradek quotas``, and real clients
seeing throttling -- confluent-kafka's ``throttle_cb`` for a producer over ``producer_byte_rate``
and a consumer over ``consumer_byte_rate``, kafka-python's throttle-time metric, and a SASL
user's quota applying to that user only.

The brokers run with ``quota.window.num=2`` (a rate over 1-2 s instead of 10-11 s), so a client
goes over its quota with a few tens of KB and its throttles are short. Assertions check that a
throttle was reported and that every record arrived, never how long anything took.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from kafka import KafkaProducer
from sasl_helpers import ADMIN, SCRAM_PASSWORD, SCRAM_USER, SETTINGS

from odradek.client import Admin, ClientQuotaAlteration, ClientQuotaFilterComponent, KafkaError
from odradek.errors import ErrorCode
from odradek.testing import BrokerProcess, start_broker, unique_topic

pytestmark = pytest.mark.integration

QUOTA_SETTINGS = {"quota.window.num": 2, "metrics.prometheus.listener": "127.0.0.1:0"}
RATE = 20_000  # bytes/s: 100 records of 1 KB are five seconds' worth
RECORDS = 100
VALUE = b"v" * 1000
TIMEOUT_S = 60


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with start_broker(tmp_path_factory.mktemp("quota-broker"), QUOTA_SETTINGS) as broker:
        yield broker
        problems = broker.log_problems()
        assert not problems, "\n".join(problems)


def _quotas_cli(broker: BrokerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "odradek", "quotas", *args, "--bootstrap-server", broker.bootstrap],
        capture_output=True,
        text=True,
        timeout=120,
    )


def _produce(bootstrap: str, topic: str, conf: dict[str, Any], throttles: list[float]) -> None:
    """Produce RECORDS small batches (batch.size keeps each batch small: a fetch may carry a few)."""
    errors: list[Any] = []
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 5,
            "batch.size": 2500,
            "throttle_cb": lambda event: throttles.append(event.throttle_time),
            **conf,
        }
    )
    for _ in range(RECORDS):
        producer.produce(topic, VALUE, on_delivery=lambda err, _msg: err is not None and errors.append(err))
        producer.poll(0)
    assert producer.flush(TIMEOUT_S) == 0, "records left undelivered"
    assert not errors, errors


def _consume_all(bootstrap: str, topic: str, conf: dict[str, Any], throttles: list[float]) -> int:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique_topic("g"),
            "enable.auto.commit": False,
            "throttle_cb": lambda event: throttles.append(event.throttle_time),
            **conf,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        got = 0
        deadline = time.monotonic() + TIMEOUT_S
        while got < RECORDS and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                assert msg.value() == VALUE
                got += 1
        return got
    finally:
        consumer.close()


def _metric(broker: BrokerProcess, name: str, **labels: str) -> float:
    return sum(
        v
        for (n, got), v in broker.metrics().items()
        if n == name and all(dict(got).get(k) == w for k, w in labels.items())
    )


# -- the APIs and the CLI ---------------------------------------------------------------------------


def test_alter_and_describe_through_the_admin_client(broker: BrokerProcess) -> None:
    user = unique_topic("user")
    with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
        entity = (("user", user), ("client-id", None))
        results = admin.alter_client_quotas(
            [
                ClientQuotaAlteration(entity, {"producer_byte_rate": 1024, "request_percentage": 50.5}),
                ClientQuotaAlteration((("user", user),), {"nonsense": 1}),
                ClientQuotaAlteration((("user", user),), {"consumer_byte_rate": -5}),
            ],
            timeout=30,
        )
        assert results[entity] is None
        error = results[(("user", user),)]
        assert isinstance(error, KafkaError) and error.code == ErrorCode.INVALID_REQUEST
        described = admin.describe_client_quotas([ClientQuotaFilterComponent.of_entity("user", user)], timeout=30)
        assert described == {entity: {"producer_byte_rate": 1024.0, "request_percentage": 50.5}}
        # strict: only entities made of the filter's components alone
        assert admin.describe_client_quotas([ClientQuotaFilterComponent.of_entity("user", user)], strict=True) == {}
        admin.alter_client_quotas([ClientQuotaAlteration(entity, {"producer_byte_rate": None})], timeout=30)
        described = admin.describe_client_quotas([ClientQuotaFilterComponent.of_entity("user", user)], timeout=30)
        assert described == {entity: {"request_percentage": 50.5}}
        # validate_only changes nothing
        admin.alter_client_quotas(
            [ClientQuotaAlteration(entity, {"request_percentage": None})], validate_only=True, timeout=30
        )
        assert admin.describe_client_quotas([ClientQuotaFilterComponent.of_entity("user", user)]) == described
        admin.alter_client_quotas([ClientQuotaAlteration(entity, {"request_percentage": None})], timeout=30)


def test_the_cli_alters_and_describes(broker: BrokerProcess) -> None:
    client_id = unique_topic("cli")
    done = _quotas_cli(
        broker, "alter", "--client-id", client_id, "--add", "producer_byte_rate=1048576,consumer_byte_rate=2048"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"Completed updating config for client-id '{client_id}'."
    done = _quotas_cli(broker, "alter", "--user-defaults", "--client-id", client_id, "--add", "request_percentage=25")
    assert done.returncode == 0, done.stderr
    done = _quotas_cli(broker, "describe", "--client-id", client_id)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        f"Quota configs for client-id '{client_id}' are consumer_byte_rate=2048.0,producer_byte_rate=1048576.0"
    ]
    done = _quotas_cli(broker, "describe")
    assert (
        f"Quota configs for the default user-principal, client-id '{client_id}' are request_percentage=25.0"
        in done.stdout
    )
    done = _quotas_cli(broker, "alter", "--client-id", client_id, "--delete", "consumer_byte_rate")
    assert done.returncode == 0, done.stderr
    assert "consumer_byte_rate" not in _quotas_cli(broker, "describe", "--client-id", client_id).stdout
    bad = _quotas_cli(broker, "alter", "--client-id", client_id, "--add", "bogus_rate=5")
    assert bad.returncode == 1 and "INVALID_REQUEST" in bad.stderr and "bogus_rate" in bad.stderr
    bad = _quotas_cli(broker, "alter", "--client-id", client_id, "--add", "producer_byte_rate=fast")
    assert bad.returncode == 1 and "KEY=NUMBER" in bad.stderr
    bad = _quotas_cli(broker, "alter", "--add", "producer_byte_rate=5")
    assert bad.returncode == 1 and "name an entity" in bad.stderr


# -- real clients throttled -------------------------------------------------------------------------


def test_a_confluent_producer_over_its_quota_is_throttled_and_delivers_everything(broker: BrokerProcess) -> None:
    topic, client_id = unique_topic("qp"), unique_topic("producer")
    done = _quotas_cli(broker, "alter", "--client-id", client_id, "--add", f"producer_byte_rate={RATE}")
    assert done.returncode == 0, done.stderr
    throttles: list[float] = []
    _produce(broker.bootstrap, topic, {"client.id": client_id}, throttles)
    assert throttles and max(throttles) > 0, throttles
    # every record is there (read by a client without a quota)
    assert _consume_all(broker.bootstrap, topic, {"client.id": unique_topic("reader")}, []) == RECORDS
    assert _metric(broker, "kafka_server_produce_throttled_requests_total", client_id=client_id) > 0
    # a client without a quota writing as much is not throttled, and, as in Kafka, its byte rate
    # is in the metrics (only client-id entities set producer_byte_rate here: tagged by its id)
    free: list[float] = []
    free_id = unique_topic("free")
    _produce(broker.bootstrap, unique_topic("qp"), {"client.id": free_id}, free)
    assert not free or max(free) == 0, free
    rates = {
        dict(got).get("client_id"): dict(got).get("user")
        for (n, got) in broker.metrics()
        if n == "kafka_server_produce_byte_rate"
    }
    assert rates.get(free_id) == "", rates
    assert _metric(broker, "kafka_server_produce_throttled_requests_total", client_id=free_id) == 0


def test_a_confluent_consumer_over_its_quota_is_throttled_and_reads_everything(broker: BrokerProcess) -> None:
    topic, client_id = unique_topic("qc"), unique_topic("consumer")
    _produce(broker.bootstrap, topic, {"client.id": unique_topic("writer")}, [])
    with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
        entity = (("client-id", client_id),)
        assert admin.alter_client_quotas([ClientQuotaAlteration(entity, {"consumer_byte_rate": RATE})]) == {
            entity: None
        }
    throttles: list[float] = []
    assert _consume_all(broker.bootstrap, topic, {"client.id": client_id}, throttles) == RECORDS
    assert throttles and max(throttles) > 0, throttles
    assert _metric(broker, "kafka_server_fetch_throttled_requests_total", client_id=client_id) > 0


def test_kafka_python_sees_the_produce_throttle_time(broker: BrokerProcess) -> None:
    topic, client_id = unique_topic("qk"), unique_topic("kp")
    done = _quotas_cli(broker, "alter", "--client-id", client_id, "--add", f"producer_byte_rate={RATE}")
    assert done.returncode == 0, done.stderr
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, client_id=client_id, linger_ms=5, batch_size=2500)
    try:
        futures = [producer.send(topic, VALUE) for _ in range(RECORDS)]
        producer.flush(TIMEOUT_S)
        assert all(f.get(timeout=TIMEOUT_S).offset >= 0 for f in futures)
        # kafka-python records every response's throttle_time_ms in its network metrics
        seen = [v for group in producer.metrics().values() for k, v in group.items() if k == "throttle-time-max"]
        assert seen and max(seen) > 0, producer.metrics()
    finally:
        producer.close()
    assert _consume_all(broker.bootstrap, topic, {"client.id": unique_topic("reader")}, []) == RECORDS


# -- a SASL user's quota ----------------------------------------------------------------------------


def _sasl(mechanism: str, user: str, password: str) -> dict[str, str]:
    return {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": password,
    }


def test_a_sasl_users_quota_applies_to_that_user_only(tmp_path: Path) -> None:
    from odradek.client import UserScramCredentialUpsertion

    with start_broker(tmp_path, {**SETTINGS, **QUOTA_SETTINGS}) as broker:
        with Admin({"bootstrap.servers": broker.bootstrap, **ADMIN}) as admin:
            created = admin.alter_user_scram_credentials(
                [UserScramCredentialUpsertion(SCRAM_USER, "SCRAM-SHA-256", SCRAM_PASSWORD, 4096)], timeout=30
            )
            assert created == {SCRAM_USER: None}
            entity = (("user", SCRAM_USER),)
            assert admin.alter_client_quotas([ClientQuotaAlteration(entity, {"producer_byte_rate": RATE})]) == {
                entity: None
            }
            # the user's SCRAM credential and its quota share /config/users/bob; both stay
            assert admin.describe_user_scram_credentials([SCRAM_USER])[SCRAM_USER] == {"SCRAM-SHA-256": 4096}
            bob: list[float] = []
        _produce(broker.bootstrap, unique_topic("bob"), _sasl("SCRAM-SHA-256", SCRAM_USER, SCRAM_PASSWORD), bob)
        assert bob and max(bob) > 0, bob
        alice: list[float] = []
        _produce(broker.bootstrap, unique_topic("alice"), _sasl("PLAIN", "alice", "alice-secret"), alice)
        assert not alice or max(alice) == 0, alice
        assert _metric(broker, "kafka_server_produce_throttled_requests_total", user=SCRAM_USER) > 0
        assert _metric(broker, "kafka_server_produce_throttled_requests_total", user="alice") == 0
        problems = broker.log_problems()
        assert not problems, "\n".join(problems)


def test_a_confluent_producer_over_its_request_quota_is_throttled(broker: BrokerProcess) -> None:
    topic, client_id = unique_topic("qr"), unique_topic("requests")
    # a millionth of a thread: every request is over it, and each throttle is one window at most
    done = _quotas_cli(broker, "alter", "--client-id", client_id, "--add", "request_percentage=0.000001")
    assert done.returncode == 0, done.stderr
    throttles: list[float] = []
    # few, large requests: each one is throttled (up to a second)
    _produce(broker.bootstrap, topic, {"client.id": client_id, "batch.size": 200_000, "linger.ms": 100}, throttles)
    assert throttles and 0 < max(throttles) <= 1.0, throttles
    assert _consume_all(broker.bootstrap, topic, {"client.id": unique_topic("reader")}, []) == RECORDS
    assert _metric(broker, "kafka_server_request_throttled_requests_total", client_id=client_id) > 0
    done = _quotas_cli(broker, "alter", "--client-id", client_id, "--delete", "request_percentage")
    assert done.returncode == 0, done.stderr


# -- a cluster: a quota altered through one broker is enforced by every broker ----------------------


@pytest.fixture(params=["zookeeper", "etcd"])
def two_brokers(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[tuple[BrokerProcess, BrokerProcess]]:
    """Brokers 1 and 2 sharing the session's ZooKeeper or etcd, both in the metadata."""
    from test_replication_cluster import metadata_settings, wait_for

    settings = {**QUOTA_SETTINGS, **metadata_settings(request.param, request, "quotas")}
    with (
        start_broker(tmp_path / "b1", {**settings, "broker.id": 1}) as b1,
        start_broker(tmp_path / "b2", {**settings, "broker.id": 2}) as b2,
    ):
        with Admin({"bootstrap.servers": b1.bootstrap}) as admin:
            wait_for("both brokers in the metadata", lambda: len(admin.describe_cluster().brokers) == 2)
        yield b1, b2
        for b in (b1, b2):
            problems = b.log_problems()
            assert not problems, "\n".join(problems)


def test_a_quota_altered_through_one_broker_is_enforced_by_every_broker(
    two_brokers: tuple[BrokerProcess, BrokerProcess],
) -> None:
    from test_replication_cluster import wait_for

    from odradek.client import NewTopic

    topic, client_id = unique_topic("qcluster"), unique_topic("everywhere")
    with Admin({"bootstrap.servers": two_brokers[0].bootstrap}) as admin:
        # one partition led by each broker: the producer writes to both
        created = admin.create_topics([NewTopic(topic, replica_assignment={0: [1], 1: [2]})], timeout=30)
        assert created == {topic: None}
        entity = (("client-id", client_id),)
        assert admin.alter_client_quotas([ClientQuotaAlteration(entity, {"producer_byte_rate": RATE})]) == {
            entity: None
        }

    def throttled_by_both() -> bool:
        # whichever broker took the alter, the other one learnt the quota from its watch
        _produce(two_brokers[0].bootstrap, topic, {"client.id": client_id}, [])
        return all(
            _metric(b, "kafka_server_produce_throttled_requests_total", client_id=client_id) > 0 for b in two_brokers
        )

    wait_for("both brokers throttling the client", throttled_by_both, timeout_s=TIMEOUT_S)
