"""A third-party transport written only against the public ``odradek.transport`` module (Kafka
over a Unix socket), served by a real broker and used by odradek's client, which picks it by
name (``transport``) or by the security protocol it declares (``security.protocol``)."""

from __future__ import annotations

import atexit
import os
import shutil
import socket
import tempfile
import types
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio
from broker_harness import plugins_with

from odradek.broker.server import BrokerServer
from odradek.client import NewTopic
from odradek.client.aio import AsyncAdmin, AsyncConsumer, AsyncProducer
from odradek.config import load_config
from odradek.interfaces import TopicPartition
from odradek.manager import PluginError, Plugins
from odradek.testing import TransportConformance
from odradek.transport import (
    Endpoint,
)


@pytest.fixture
def socket_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="odr-unix-", dir="/tmp"))  # short: AF_UNIX paths are <= 107 bytes
    yield path
    shutil.rmtree(path, ignore_errors=True)


DOCS = Path(__file__).resolve().parent.parent / "docs" / "plugins.md"


def documented_example() -> str:
    """The Unix-socket transport of docs/plugins.md's "Transport plugins", as printed there."""
    text = DOCS.read_text()
    start = text.index("```python\n", text.index("## Transport plugins")) + len("```python\n")
    return text[start : text.index("```\n", start)]


def unix_transport(socket_dir: Path) -> types.ModuleType:
    """The plugin module: docs/plugins.md's example run as written, its sockets in ``socket_dir``
    (``<socket_dir>/<port>.sock``: the listener's port only names the socket file)."""
    source = documented_example()
    assert 'SOCKET_DIR = "/run/odradek"' in source
    module = types.ModuleType("unix_transport")
    exec(compile(source.replace('"/run/odradek"', repr(str(socket_dir))), str(DOCS), "exec"), module.__dict__)
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
        assert os.listdir(socket_dir) == [bootstrap.rpartition(":")[2] + ".sock"]
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


class TestTheDocumentedTransportConforms(TransportConformance):
    """The documented example passes the transport suite, over its own socket files."""

    directory = Path(tempfile.mkdtemp(prefix="odr-unix-suite-", dir="/tmp"))
    atexit.register(shutil.rmtree, directory, True)
    module = unix_transport(directory)
    factory = module.odradek_register_transports()[0]

    async def open_stream(self, endpoint: Endpoint) -> trio.abc.Stream:
        return await trio.open_unix_socket(self.module.path_for(endpoint.port))


async def test_a_stale_socket_file_does_not_stop_a_restart(tmp_path: Path, socket_dir: Path) -> None:
    """A socket file left by an earlier process (kill -9) is replaced, and a listener removes its
    own file when it stops."""
    plugins = _plugins(unix_transport(socket_dir))
    async with unix_broker(tmp_path, plugins) as bootstrap:
        (name,) = os.listdir(socket_dir)
        assert bootstrap.endswith(":" + name.removesuffix(".sock"))
    assert os.listdir(socket_dir) == []
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(socket_dir / "40000.sock"))  # as if a killed broker had left it
    stale.close()
    overrides = {"log.dirs": str(tmp_path), "listeners": "PLAINTEXT://127.0.0.1:40000", "transport": "unix"}
    server = BrokerServer(load_config(env={}, plugins=plugins, overrides=overrides), plugins)
    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve)
        assert [ep.port for ep in server.endpoints] == [40000]
        nursery.cancel_scope.cancel()


def test_an_unknown_transport_or_security_protocol_is_named(socket_dir: Path) -> None:
    plugins = _plugins(unix_transport(socket_dir))
    with pytest.raises(
        PluginError, match=r"no transport plugin named 'pigeon' is loaded \(available: ssl, tcp, unix\)"
    ):
        AsyncProducer({"bootstrap.servers": "b:9092", "transport": "pigeon"}, plugins=plugins)
    with pytest.raises(
        PluginError,
        match=r"security protocol 'QUIC' \(loaded transports: ssl, tcp, unix\); set 'transport' to one of them",
    ):
        AsyncProducer({"bootstrap.servers": "b:9092", "security.protocol": "QUIC"}, plugins=plugins)
