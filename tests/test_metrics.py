"""The broker's metrics under Kafka's names (odradek.metrics) and their Prometheus endpoint
(``metrics.prometheus.listener``): the counting, a whole broker's samples scraped over HTTP,
and a broker process scraped after a real client produced and consumed."""

from __future__ import annotations

import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
import trio
from broker_harness import batch, broker_config, broker_plugins, create, fetch_records, produce, running_broker, serving

from odradek.broker.api import DEBUGGING_REPLICA_ID, FetchPartition, IsolationLevel
from odradek.broker.server import BrokerServer, ListenerError
from odradek.config import ConfigError, default_config, parse_host_port
from odradek.errors import ErrorCode
from odradek.interfaces import Endpoint, TopicPartition
from odradek.metrics import REQUEST_TIME_BUCKETS_S, BrokerMetrics
from odradek.plugins.transport_tcp.apis import Dispatcher
from odradek.protocol import parse_request_header
from odradek.testing.broker import parse_samples, sample, start_broker, unique_topic
from odradek.testing.transport import api_versions_frame


def scrape(host: str, port: int) -> str:
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10) as response:
        assert response.status == 200
        return response.read().decode()


# -- counting -------------------------------------------------------------------------------------


def test_appends_and_failures_count_per_topic_and_for_all_topics() -> None:
    m = BrokerMetrics()
    m.appended("a", 3, 300)
    m.appended("a", 2, 200)
    m.appended("b", 1, 50)
    m.produce_refused("b", ErrorCode.INVALID_RECORD)  # a failure
    m.produce_refused("b", ErrorCode.NOT_LEADER_OR_FOLLOWER)  # an election: Kafka does not count it failed
    a, b, every = m.topic("a"), m.topic("b"), m.all_topics
    assert (a.messages_in, a.bytes_in, a.produce_requests, a.failed_produce_requests) == (5, 500, 2, 0)
    assert (b.messages_in, b.bytes_in, b.produce_requests, b.failed_produce_requests) == (1, 50, 3, 1)
    assert (every.messages_in, every.bytes_in, every.produce_requests, every.failed_produce_requests) == (6, 550, 5, 1)


def test_fetches_split_consumers_from_followers() -> None:
    m = BrokerMetrics()
    m.fetched("t", 1000, follower=False)
    m.fetched("t", 0, follower=False)  # a partition with nothing new is still a fetch of it
    m.fetched("t", 700, follower=True)  # a follower's fetch counts as a fetch, its bytes as replication
    m.fetch_refused("t", ErrorCode.CORRUPT_MESSAGE)
    m.fetch_refused("t", ErrorCode.OFFSET_OUT_OF_RANGE)  # expected: not a failure
    m.replicated("t", 700)
    t = m.topic("t")
    assert (t.bytes_out, t.fetch_requests, t.failed_fetch_requests) == (1000, 5, 1)
    assert (t.replication_bytes_out, t.replication_bytes_in) == (700, 700)
    assert m.all_topics.bytes_out == 1000 and m.all_topics.replication_bytes_out == 700


def test_a_deleted_topics_counters_go_but_the_all_topics_totals_stay() -> None:
    m = BrokerMetrics()
    m.appended("gone", 4, 400)
    m.forget_topic("gone")
    assert "gone" not in m.topics
    assert m.all_topics.messages_in == 4


def test_request_times_fall_into_their_buckets() -> None:
    m = BrokerMetrics()
    m.request_done(0, 7, 0.0003)  # first bucket (<= 0.5 ms)
    m.request_done(0, 7, 0.0005)  # a bound is inside its bucket ("le")
    m.request_done(0, 9, 0.2)
    m.request_done(0, 9, 99.0)  # beyond the last bound: +Inf
    rt = m.requests[0]
    assert rt.by_version == {7: 2, 9: 2} and rt.count == 4
    assert rt.buckets[0] == 2
    assert rt.buckets[REQUEST_TIME_BUCKETS_S.index(0.25)] == 1
    assert rt.buckets[-1] == 1
    assert rt.seconds == pytest.approx(99.2008)


async def test_the_dispatcher_counts_every_request_with_its_time() -> None:
    config = default_config()

    class Broker:  # what ApiVersions needs of a broker: nothing but the counters
        metrics = BrokerMetrics()

    dispatcher = Dispatcher(Broker(), config, Endpoint("PLAINTEXT", "127.0.0.1", 9092))
    for version in (3, 3, 1):
        frame = bytearray(api_versions_frame(version, 5))
        await dispatcher.process(parse_request_header(frame), frame, "peer")
    rt = Broker.metrics.requests[18]
    assert rt.by_version == {3: 2, 1: 1} and rt.count == 3 and sum(rt.buckets) == 3


# -- config ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "expected"),
    [("127.0.0.1:9404", ("127.0.0.1", 9404)), ("[::1]:0", ("::1", 0)), (":9404", ("0.0.0.0", 9404))],
)
def test_the_listener_is_host_and_port(spec: str, expected: tuple[str, int]) -> None:
    assert parse_host_port(spec, "metrics.prometheus.listener") == expected
    assert default_config(metrics_prometheus_listener=spec)["metrics.prometheus.listener"] == spec


@pytest.mark.parametrize("bad", ["9404", "host:", "host:http", "h:70000"])
def test_a_bad_listener_is_a_config_error_naming_the_key(bad: str) -> None:
    with pytest.raises(ConfigError, match="metrics.prometheus.listener"):
        default_config(metrics_prometheus_listener=bad)


def test_metrics_are_not_served_by_default() -> None:
    assert default_config()["metrics.prometheus.listener"] == ""


# -- a whole broker, scraped over HTTP ------------------------------------------------------------


async def test_a_brokers_metrics_are_scraped_with_kafkas_names(tmp_path: Path) -> None:
    server = BrokerServer(broker_config(tmp_path, metrics_prometheus_listener="127.0.0.1:0"), broker_plugins())
    async with serving(server) as core:
        assert server.metrics_address is not None
        host, port = server.metrics_address
        assert port != 0
        await create(core, "visits", partitions=2)
        tp = TopicPartition("visits", 0)
        for values in ([b"a", b"b", b"c"], [b"d", b"e"]):
            result = await produce(core, tp, batch(values))
            assert result.error == 0
        # no such partition, no such topic: answered, but nothing counted (Kafka answers them
        # before its replica manager), so made-up names never become series
        assert (await produce(core, TopicPartition("visits", 7), batch([b"x"]))).error != 0
        assert (await produce(core, TopicPartition("made-up", 0), batch([b"x"]))).error != 0
        # a failure: a record without a key on a compacted topic (INVALID_RECORD)
        await create(core, "compacted", **{"cleanup.policy": "compact"})
        assert (await produce(core, TopicPartition("compacted", 0), batch([b"no key"]))).error != 0
        assert len(await fetch_records(core, tp)) == 5
        # the coordinators' own reads (replica id -2) are not consumer traffic
        await core.fetch(
            DEBUGGING_REPLICA_ID, 0, 0, 1 << 20, IsolationLevel.READ_UNCOMMITTED, [FetchPartition(tp, 0, 1 << 20)]
        )
        # the scrape runs in a thread (it is an HTTP client); the samples are built on this one
        samples = parse_samples(await trio.to_thread.run_sync(scrape, host, port))
        log_size = core.replica_manager.partitions[tp].log.size_in_bytes
    assert sample(samples, "kafka_server_brokertopicmetrics_messagesin_total", topic="visits") == 5
    assert sample(samples, "kafka_server_brokertopicmetrics_bytesin_total", topic="visits") == log_size
    assert sample(samples, "kafka_server_brokertopicmetrics_totalproducerequests_total", topic="visits") == 2
    assert sample(samples, "kafka_server_brokertopicmetrics_failedproducerequests_total", topic="visits") == 0
    assert sample(samples, "kafka_server_brokertopicmetrics_failedproducerequests_total", topic="compacted") == 1
    assert not [labels for name, labels in samples if ("topic", "made-up") in labels]
    assert sample(samples, "kafka_server_brokertopicmetrics_bytesout_total", topic="visits") == log_size
    assert sample(samples, "kafka_server_brokertopicmetrics_totalfetchrequests_total", topic="visits") == 1
    assert sample(samples, "kafka_server_brokertopicmetrics_messagesin_alltopics_total") >= 5
    assert sample(samples, "kafka_server_replicamanager_partitioncount") >= 2
    assert sample(samples, "kafka_server_replicamanager_leadercount") == sample(
        samples, "kafka_server_replicamanager_partitioncount"
    )
    assert sample(samples, "kafka_server_replicamanager_underreplicatedpartitions") == 0
    assert sample(samples, "kafka_server_replicamanager_underminisrpartitioncount") == 0
    assert sample(samples, "kafka_log_log_logendoffset", topic="visits", partition="0") == 5
    assert sample(samples, "kafka_log_log_logendoffset", topic="visits", partition="1") == 0
    assert sample(samples, "kafka_log_log_logstartoffset", topic="visits", partition="0") == 0
    assert sample(samples, "kafka_cluster_partition_highwatermark", topic="visits", partition="0") == 5
    assert sample(samples, "kafka_log_log_size", topic="visits", partition="0") == log_size
    assert sample(samples, "kafka_controller_kafkacontroller_activecontrollercount") == 1
    assert sample(samples, "kafka_server_delayedoperationpurgatory_purgatorysize", delayedOperation="Fetch") == 0
    assert sample(samples, "kafka_network_socketserver_memorypoolused") == 0
    assert sample(samples, "kafka_coordinator_group_groupmetadatamanager_numgroups") == 0
    assert sample(samples, "process_resident_memory_bytes") > 0


async def test_a_metrics_port_in_use_stops_the_start_naming_the_key(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        server = BrokerServer(
            broker_config(tmp_path, metrics_prometheus_listener=f"127.0.0.1:{port}"), broker_plugins()
        )
        with pytest.raises(BaseExceptionGroup) as raised:
            async with trio.open_nursery() as nursery:
                await nursery.start(server.serve)
    assert raised.group_contains(
        ListenerError, match=rf"metrics.prometheus.listener 127.0.0.1:{port}: .*in use", depth=None
    )


# -- a broker process and a real client -----------------------------------------------------------


@pytest.mark.integration
def test_a_broker_process_serves_metrics_of_what_kcat_produced_and_consumed(tmp_path: Path) -> None:
    topic = unique_topic("metrics")
    with start_broker(tmp_path, {"metrics.prometheus.listener": "127.0.0.1:0"}) as broker:
        assert broker.metrics_url().startswith("http://127.0.0.1:")
        lines = "".join(f"record-{i}\n" for i in range(100))
        subprocess.run(
            ["kcat", "-b", broker.bootstrap, "-P", "-t", topic], input=lines.encode(), check=True, timeout=60
        )
        consumed = subprocess.run(
            ["kcat", "-b", broker.bootstrap, "-C", "-t", topic, "-o", "beginning", "-e", "-q"],
            capture_output=True,
            check=True,
            timeout=60,
        )
        assert consumed.stdout.decode().splitlines() == [f"record-{i}" for i in range(100)]
        deadline = time.monotonic() + 10
        while True:  # kcat's last fetch may still be in the broker's hands
            samples = broker.metrics()
            if sample(samples, "kafka_server_brokertopicmetrics_bytesout_total", topic=topic) > 0:
                break
            assert time.monotonic() < deadline, "no bytes out counted after kcat consumed"
            time.sleep(0.1)
        # a client connection open while the broker is scraped is counted
        with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as held:
            frame = api_versions_frame(3, 1)
            held.sendall(len(frame).to_bytes(4, "big") + frame)
            assert held.recv(4)  # answered: the broker holds the connection
            open_connections = sample(broker.metrics(), "kafka_server_socket_server_metrics_connection_count")
        assert open_connections >= 1
    assert sample(samples, "kafka_server_brokertopicmetrics_messagesin_total", topic=topic) == 100
    assert sample(samples, "kafka_log_log_logendoffset", topic=topic, partition="0") == 100
    produce_requests = sum(
        v
        for (name, labels), v in samples.items()
        if name == "kafka_network_requestmetrics_requests_total" and dict(labels)["request"] == "Produce"
    )
    assert produce_requests >= 1
    assert sample(samples, "kafka_network_requestmetrics_totaltime_seconds_count", request="Fetch") >= 1
    assert sample(
        samples, "kafka_network_requestmetrics_totaltime_seconds_bucket", request="Fetch", le="+Inf"
    ) == sample(samples, "kafka_network_requestmetrics_totaltime_seconds_count", request="Fetch")


async def test_a_deleted_topics_series_go_with_it(tmp_path: Path) -> None:
    async with running_broker(tmp_path) as core:
        await create(core, "gone", partitions=2)
        assert (await produce(core, TopicPartition("gone", 1), batch([b"a", b"b"]))).error == 0
        assert core.metrics.topic("gone").messages_in == 2
        assert (await core.delete_topics(["gone"], 5000))["gone"].error == 0
        with trio.fail_after(10):
            while core.replica_manager.hosted_partitions("gone"):  # the deletion reaches the replicas
                await trio.sleep(0.01)
        assert "gone" not in core.metrics.topics
        assert core.metrics.all_topics.messages_in == 2
