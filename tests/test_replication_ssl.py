"""Two brokers replicating over TLS: clients use each broker's PLAINTEXT listener, the brokers
reach each other on their SSL listener (``inter.broker.listener.name=SSL``), which requires
client certificates (``ssl.client.auth=required``): a broker's keystore is also the certificate
it presents to the other, and its truststore checks the other's, with host name verification."""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from test_replication_cluster import consume_all, partition_state, produce, wait_for
from tls_helpers import Pki, make_pki

from odradek.testing.broker import BrokerProcess, start_broker, unique_topic
from odradek.testing.servers import unique_chroot

pytestmark = pytest.mark.integration


def _ssl_port(broker: BrokerProcess) -> int:
    found = re.search(r"listening on SSL://[^\s:]+:(\d+)", broker.log_path.read_text())
    assert found, broker.log_tail()
    return int(found.group(1))


def _remote_ports(pid: int) -> set[int]:
    """Remote ports of the TCP connections process ``pid`` holds (its socket inodes matched
    against /proc/net/tcp, where addresses are hex ``ip:port``)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as lines:
            for line in list(lines)[1:]:
                fields = line.split()
                if fields[9] in inodes and fields[3] == "01":  # ESTABLISHED
                    ports.add(int(fields[2].rsplit(":", 1)[1], 16))
    return ports


@contextlib.contextmanager
def two_tls_brokers(tmp_path: Path, zk: Any, pki: Pki) -> Iterator[dict[int, BrokerProcess]]:
    settings = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
        "inter.broker.listener.name": "SSL",
        "ssl.keystore.location": str(pki.server_pem),
        "ssl.truststore.location": str(pki.ca_pem),
        "ssl.client.auth": "required",
        "metadata": "zookeeper",
        "zookeeper.connect": zk.connect_string + unique_chroot("tls-repl"),
        "zookeeper.session.timeout.ms": 2000,
        "replica.fetch.wait.max.ms": 200,
    }
    with contextlib.ExitStack() as stack:
        yield {i: stack.enter_context(start_broker(tmp_path / f"b{i}", {**settings, "broker.id": i})) for i in (1, 2)}


def replicate_a_topic(brokers: dict[int, BrokerProcess], prefix: str) -> int:
    """Through the brokers' client listeners: a topic of one partition on both brokers with
    min.insync.replicas 2, 200 records produced with acks=all (so both replicas hold them, which
    only replication between the brokers can do) and read back; returns the leader's id."""
    bootstrap = ",".join(b.bootstrap for b in brokers.values())
    admin = AdminClient({"bootstrap.servers": bootstrap})
    wait_for("two live brokers", lambda: len(admin.list_topics(timeout=2).brokers) == 2)
    topic = unique_topic(prefix)
    admin.create_topics([NewTopic(topic, 1, 2, config={"min.insync.replicas": "2"})])[topic].result(15)
    leader, _ = wait_for("a full ISR", lambda: (s := partition_state(admin, topic)) and len(s[1]) == 2 and s)
    acked = produce(bootstrap, topic, [b"v%d" % i for i in range(200)])
    assert len(acked) == 200
    assert set(consume_all(bootstrap, topic, 200)) == acked
    return int(leader)


def test_replication_over_an_ssl_inter_broker_listener(tmp_path: Path, zookeeper_server: Any) -> None:
    pki = make_pki(tmp_path / "pki")
    with two_tls_brokers(tmp_path, zookeeper_server, pki) as brokers:
        leader = replicate_a_topic(brokers, "tls-repl")
        follower = 2 if leader == 1 else 1
        process = brokers[follower].process
        assert process is not None
        # the follower fetches from the leader's SSL listener, not from its PLAINTEXT one
        ports = _remote_ports(process.pid)
        assert _ssl_port(brokers[leader]) in ports, (ports, brokers[leader].log_tail())
        assert brokers[leader].port not in ports
        for broker in brokers.values():
            assert "TLS handshake failed" not in broker.log_path.read_text(), broker.log_tail()
