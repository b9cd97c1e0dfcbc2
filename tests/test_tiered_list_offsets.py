"""ListOffsets LATEST_TIERED (-5, KIP-1005; ListOffsets v9, and v10 with KIP-1075's timeout)
against a real tiered broker: odradek's admin client ("latest-tiered"), ``odradek topics
offsets --time latest-tiered`` (kafka-get-offsets), and raw requests at v9, v10 and v1 (Kafka
answers -5 whatever the version: its broker does not check it).

The highest offset in remote storage is checked against the local log start: with
``local.retention.bytes=0`` every copied segment is deleted locally, so once tiering has settled
the local log starts just after the highest tiered offset.
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Iterator
from typing import Any

import pytest
from client_helpers import TIMEOUT_S, produce, read_response
from test_tiered_storage_clients import tiered_settings

from odradek.cli import main
from odradek.client import Admin
from odradek.client.requests import make_request
from odradek.errors import ErrorCode
from odradek.protocol import ApiKey, decode_response, encode_request
from odradek.testing import BrokerProcess, start_broker, unique_topic

pytestmark = pytest.mark.integration

RECORDS = 300


@pytest.fixture(scope="module")
def tiered_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    workdir = tmp_path_factory.mktemp("tiered-offsets")
    with start_broker(workdir, tiered_settings(workdir)) as broker:
        yield broker


@pytest.fixture(scope="module")
def topics(tiered_broker: BrokerProcess) -> dict[str, Any]:
    """A tiered topic whose tiering has settled (and the highest offset it tiered), an empty
    tiered topic and a topic that is not tiered, both written to."""
    broker = tiered_broker
    tiered, empty, plain = unique_topic("tiered"), unique_topic("empty"), unique_topic("plain")
    small = {"segment.bytes": "8192"}
    with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
        from odradek.client import NewTopic

        created = admin.create_topics(
            [
                NewTopic(tiered, 1, 1, {**small, "remote.storage.enable": "true", "local.retention.bytes": "0"}),
                NewTopic(empty, 1, 1, {**small, "remote.storage.enable": "true"}),
                NewTopic(plain, 1, 1, small),
            ],
            timeout=TIMEOUT_S,
        )
        assert all(error is None for error in created.values()), created
        records = [(b"k%d" % i, b"value-%05d-" % i + b"x" * 64) for i in range(RECORDS)]
        produce(broker, tiered, records, **{"batch.size": 2048})
        produce(broker, plain, records, **{"batch.size": 2048})
        deadline = time.monotonic() + TIMEOUT_S
        while True:  # until every rolled segment is copied and deleted locally
            found = admin.list_offsets({(tiered, 0): "latest-tiered"}, timeout=TIMEOUT_S)
            local = admin.list_offsets({(tiered, 0): "earliest-local"}, timeout=TIMEOUT_S)
            highest = found[next(iter(found))].offset
            if highest > 0 and local[next(iter(local))].offset == highest + 1:
                break
            assert time.monotonic() < deadline, f"tiering did not settle: {highest=}, {local=}"
            broker.check_alive()
            time.sleep(0.1)
    return {"tiered": tiered, "empty": empty, "plain": plain, "highest": highest}


def test_odradeks_admin_lists_latest_tiered(tiered_broker: BrokerProcess, topics: dict[str, Any]) -> None:
    with Admin({"bootstrap.servers": tiered_broker.bootstrap}) as admin:
        specs = {(topics[name], 0): "latest-tiered" for name in ("tiered", "empty", "plain")}
        found = {tp.topic: r for tp, r in admin.list_offsets(specs, timeout=TIMEOUT_S).items()}
        assert found[topics["tiered"]].offset == topics["highest"]
        assert found[topics["tiered"]].leader_epoch == 0
        assert (found[topics["empty"]].offset, found[topics["empty"]].leader_epoch) == (-1, -1)  # nothing tiered
        assert (found[topics["plain"]].offset, found[topics["plain"]].leader_epoch) == (-1, -1)  # not tiered
        earliest = admin.list_offsets({(topics["tiered"], 0): "earliest"}, timeout=TIMEOUT_S)
        assert [r.offset for r in earliest.values()] == [0]  # the whole log still starts at 0
        with pytest.raises(ValueError, match="unknown offset spec 'latest-tierd'"):
            admin.list_offsets({(topics["tiered"], 0): "latest-tierd"}, timeout=TIMEOUT_S)


def test_topics_offsets_cli(
    tiered_broker: BrokerProcess, topics: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    boot = ["--bootstrap-server", tiered_broker.bootstrap]
    tiered = topics["tiered"]
    for time_spec, expected in (
        ("latest-tiered", topics["highest"]),
        ("-5", topics["highest"]),
        ("earliest-local", topics["highest"] + 1),
        ("-4", topics["highest"] + 1),
        ("earliest", 0),
        ("latest", RECORDS),
    ):
        assert main(["topics", "offsets", *boot, "--topic", tiered, "--time", time_spec]) == 0
        assert capsys.readouterr().out == f"{tiered}:0:{expected}\n", time_spec
    assert main(["topics", "offsets", *boot, "--topic", topics["empty"], "--time", "latest-tiered"]) == 0
    assert capsys.readouterr().out == f"{topics['empty']}:0:\n"  # none: no offset, as kafka-get-offsets
    assert main(["topics", "offsets", *boot, "--topic", tiered, "--time", "-6"]) != 0
    assert "--time must be earliest, latest, max-timestamp, earliest-local, latest-tiered" in capsys.readouterr().err
    assert main(["topics", "offsets", *boot, "--topic", tiered, "--partitions", "0,3"]) == 1
    assert "has no partition 3" in capsys.readouterr().err


def _list_offsets(sock: socket.socket, version: int, topic: str, timestamp: int) -> Any:
    fields: dict[str, Any] = {
        "replica_id": -1,
        "isolation_level": 0,
        "topics": [{"name": topic, "partitions": [{"partition_index": 0, "timestamp": timestamp}]}],
    }
    if version >= 10:
        fields["timeout"] = 5000
    request = make_request(ApiKey.LIST_OFFSETS, version, **fields)
    frame = encode_request(request, correlation_id=version, client_id="raw")
    sock.sendall(struct.pack(">i", len(frame)) + frame)
    cid, response = decode_response(ApiKey.LIST_OFFSETS, version, read_response(sock))
    assert cid == version
    (answer,) = response.topics[0].partitions
    return answer


@pytest.mark.parametrize("version", [9, 10, 1])
def test_a_raw_list_offsets_latest_tiered(tiered_broker: BrokerProcess, topics: dict[str, Any], version: int) -> None:
    """v9 and v10 (its timeout_ms taken), and v1, older than KIP-1005: Kafka's broker answers -5
    whatever the version (ReplicaManager.fetchOffset checks the version only for
    OFFSET_NOT_AVAILABLE), so odradek does too."""
    with socket.create_connection(("127.0.0.1", tiered_broker.port), timeout=10) as sock:
        tiered = _list_offsets(sock, version, topics["tiered"], -5)
        assert (int(tiered.error_code), tiered.offset) == (ErrorCode.NONE, topics["highest"])
        assert tiered.timestamp == -1
        if version >= 4:
            assert tiered.leader_epoch == 0
        plain = _list_offsets(sock, version, topics["plain"], -5)
        assert (int(plain.error_code), plain.offset) == (ErrorCode.NONE, -1)
        assert version < 4 or plain.leader_epoch == -1
