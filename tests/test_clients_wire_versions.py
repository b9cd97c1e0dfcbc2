"""Real clients negotiate the flexible Produce and Fetch versions: confluent-kafka (librdkafka)
produces and consumes through them, counted per version in the broker's request metrics
(``kafka_network_requestmetrics_requests_total{request, version}``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from client_helpers import consume, grown_versions, produce, requests_by_version

from odradek.testing import BrokerProcess, start_broker, unique_topic

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def broker() -> Iterator[BrokerProcess]:
    """A broker whose metrics (requests per API and version) are served."""
    with start_broker(settings={"metrics.prometheus.listener": "127.0.0.1:0"}) as process:
        yield process


def test_librdkafka_produces_and_fetches_with_the_flexible_versions(broker: BrokerProcess) -> None:
    topic = unique_topic("flex")
    produce_before = requests_by_version(broker, "Produce")
    fetch_before = requests_by_version(broker, "Fetch")
    records = [(f"k{i}".encode(), f"v{i}".encode()) for i in range(20)]
    produce(broker, topic, records)
    got = consume(broker, topic, 20)
    assert [(m.key(), m.value()) for m in got] == records
    produced = grown_versions(produce_before, requests_by_version(broker, "Produce"))
    fetched = grown_versions(fetch_before, requests_by_version(broker, "Fetch"))
    # librdkafka 2.16 speaks Produce v10 and Fetch v16: the versions with KIP-951's leader fields
    assert produced and min(produced) >= 10, produced
    assert fetched and min(fetched) >= 16, fetched
