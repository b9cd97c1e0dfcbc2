"""A third-party transport written only against the public ``odradek.transport`` module (Kafka
over a Unix socket), served by a real broker and used by odradek's client, which picks it by
name (``transport``) or by the security protocol it declares (``security.protocol``)."""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import types
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
from broker_harness import plugins_with

from odradek.broker.server import BrokerServer
from odradek.client import NewTopic
from odradek.client.aio import AsyncAdmin, AsyncConsumer, AsyncProducer
from odradek.config import Config, load_config
from odradek.hookspecs import hookimpl
from odradek.interfaces import TopicPartition
from odradek.manager import PluginError, Plugins
from odradek.transport import (
    Broker,
    Connection,
    Dispatcher,
    Endpoint,
    TransportFactory,
    client_connection,
    serve_connection,
)


@pytest.fixture
def socket_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="odr-unix-", dir="/tmp"))  # short: AF_UNIX paths are <= 107 bytes
    yield path
    shutil.rmtree(path, ignore_errors=True)


def unix_transport(socket_dir: Path) -> types.ModuleType:
    """The plugin module: a listener and a connector for Kafka frames over AF_UNIX sockets at
    ``<socket_dir>/<port>.sock`` (the listener's port only names the socket file)."""

    def path_for(port: int) -> str:
        return str(socket_dir / f"{port}.sock")

    class UnixListener:
        def __init__(self, config: Config, broker: Broker, endpoint: Endpoint) -> None:
            self.config, self.broker, self.endpoint = config, broker, endpoint

        async def serve(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
            port = self.endpoint.port or 9
            sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            await sock.bind(path_for(port))
            sock.listen()
            dispatcher = Dispatcher(self.broker, self.config, self.endpoint)
            with sock:
                async with trio.open_nursery() as connections:
                    ep = self.endpoint
                    task_status.started([Endpoint(ep.name, ep.host, port, ep.security_protocol)])
                    while True:
                        client, _ = await sock.accept()
                        connections.start_soon(
                            lambda c=client: serve_connection(c, dispatcher, self.config, peer="unix")
                        )

    class UnixConnector:
        def __init__(self, client_config: Mapping[str, str] | None = None) -> None:
            self.client_config = client_config

        async def connect(self, host: str, port: int, *, timeout_s: float) -> Connection:
            with trio.fail_after(timeout_s):
                stream = await trio.open_unix_socket(path_for(port))
            return client_connection(stream, self.client_config)

    module = types.ModuleType("unix_transport")
    module.odradek_register_transports = hookimpl(  # type: ignore[attr-defined]
        lambda: [TransportFactory("unix", ("PLAINTEXT", "UNIX"), UnixListener, UnixConnector, "Kafka over AF_UNIX")]
    )
    return module


_plugins = plugins_with


@asynccontextmanager
async def unix_broker(data_dir: Path, plugins: Plugins) -> AsyncIterator[str]:
    """A broker whose only listener is the unix transport (``transport = "unix"``); yields its
    bootstrap address (host:port, which the unix connector turns into the socket path)."""
    overrides = {"log.dirs": str(data_dir), "listeners": "PLAINTEXT://127.0.0.1:0", "transport": "unix"}
    server = BrokerServer(load_config(env={}, plugins=plugins, overrides=overrides), plugins)
    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve)
        (ep,) = server.endpoints
        try:
            yield f"{ep.host}:{ep.port}"
        finally:
            nursery.cancel_scope.cancel()


@pytest.mark.parametrize("select", [{"transport": "unix"}, {"security.protocol": "UNIX"}])
async def test_a_third_party_transport_serves_the_broker_and_the_client(
    tmp_path: Path, socket_dir: Path, select: dict[str, str]
) -> None:
    plugins = _plugins(unix_transport(socket_dir))
    async with unix_broker(tmp_path, plugins) as bootstrap:
        assert os.listdir(socket_dir) == ["9.sock"]
        config = {"bootstrap.servers": bootstrap, **select}
        async with AsyncAdmin(config, plugins=plugins) as admin:
            await admin.create_topics([NewTopic("over-unix", 1, 1)])
        async with AsyncProducer(config, plugins=plugins) as producer:
            assert (await producer.send_and_wait("over-unix", b"hello", key=b"k")).offset == 0
        async with AsyncConsumer({**config, "auto.offset.reset": "earliest"}, plugins=plugins) as consumer:
            consumer.assign([TopicPartition("over-unix", 0)])
            got: list[tuple[bytes | None, bytes | None]] = []
            with trio.fail_after(10):
                while not got:
                    batches = await consumer.poll(timeout=1.0)
                    got += [(r.key, r.value) for rs in batches.values() for r in rs]
        assert got == [(b"k", b"hello")]


def test_an_unknown_transport_or_security_protocol_is_named(socket_dir: Path) -> None:
    plugins = _plugins(unix_transport(socket_dir))
    with pytest.raises(PluginError, match=r"no transport plugin named 'pigeon' is loaded \(available: tcp, unix\)"):
        AsyncProducer({"bootstrap.servers": "b:9092", "transport": "pigeon"}, plugins=plugins)
    with pytest.raises(
        PluginError, match=r"security protocol 'SSL' \(loaded transports: tcp, unix\); set 'transport' to one of them"
    ):
        AsyncProducer({"bootstrap.servers": "b:9092", "security.protocol": "SSL"}, plugins=plugins)
