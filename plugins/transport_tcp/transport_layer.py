"""How a connection's bytes move: Kafka's ``TransportLayer``, plain or TLS, over one socket.

The connection layer (:class:`~.connection.KafkaConnection`, :class:`~.framing.FrameReader`,
the client's :class:`~.client.TcpConnection`) frames Kafka requests; a transport layer is what it
reads those bytes from and writes them to. Kafka splits its channels the same way
(``PlaintextTransportLayer``, ``SslTransportLayer``), and the split is what lets a SASL
authenticator -- which speaks Kafka requests, whatever carries them -- run over either one
(SASL_PLAINTEXT, SASL_SSL) without knowing which.

Both layers work on the *non-blocking* socket directly (see docs/performance.md): a read is a
call that returns what is there now or raises ``BlockingIOError``; the caller then awaits
:meth:`wait_readable`. Writes wait for the socket only when the kernel's send buffer is full,
so backpressure from a slow peer reaches the writer unchanged.

:class:`PlaintextTransportLayer` is the PLAINTEXT path as it always was (``os.readv``,
``os.write``, ``os.sendfile``). :class:`SslTransportLayer` runs an ``ssl.SSLObject`` over two
``MemoryBIO``\\ s (sans-IO TLS): ciphertext is read from the socket into the incoming BIO and
decrypted into the caller's buffer; plaintext is encrypted in chunks of ``WRITE_CHUNK`` bytes and
each chunk's ciphertext is written out before the next is encrypted, so a connection holds at
most one chunk of ciphertext whatever the response size. A file range (a Fetch record slice)
cannot go through ``sendfile`` -- the kernel would send it unencrypted -- so it is read in
``WRITE_CHUNK`` pieces with ``os.pread`` and encrypted, as Kafka's ``SslTransportLayer`` does for
``FileRecords``.
"""

from __future__ import annotations

import os
import ssl
import struct
from collections.abc import Callable
from typing import Protocol

import trio

from odradek.principal import KafkaPrincipal

from .framing import FrameError, OnBlock, send_all, sendfile

#: Plaintext bytes encrypted at a time (four TLS records): bounds the ciphertext a connection
#: holds, and the file bytes read for a Fetch record slice, whatever the response size.
WRITE_CHUNK = 64 * 1024
#: Ciphertext read from the socket at a time.
NET_READ = 64 * 1024
_SIZE = struct.Struct(">i")


class TransportLayer(Protocol):
    """The bytes of one connection; one reader and one writer task may use it at once."""

    #: the socket underneath (accepted by a listener, or connected by a client)
    sock: trio.socket.SocketType
    #: whether :meth:`write_file` sends file ranges without copying them through user space
    zero_copy: bool

    async def handshake(self) -> None:
        """Whatever must happen before the first Kafka byte (nothing for PLAINTEXT)."""

    def read_into(self, view: memoryview) -> int:
        """Bytes read into ``view`` (at least one), 0 at EOF; raises ``BlockingIOError`` when
        nothing is there yet (then await :meth:`wait_readable`)."""

    async def wait_readable(self) -> None:
        """Wait until :meth:`read_into` may have something."""

    async def write(self, data: bytes | bytearray | memoryview, on_block: OnBlock = None) -> None:
        """Write every byte of ``data``, calling ``on_block`` when the peer is not reading."""

    async def write_file(self, fd: int, offset: int, count: int, on_block: OnBlock = None) -> None:
        """Write ``count`` bytes of file ``fd`` from ``offset``; ``FrameError`` if it ends early."""

    def close(self) -> None:
        """Close the connection (without waiting for anything)."""


class PlaintextTransportLayer:
    """PLAINTEXT: the socket's bytes as they are; record slices by ``os.sendfile``."""

    zero_copy = True

    def __init__(self, sock: trio.socket.SocketType) -> None:
        self.sock = sock
        self._fd = sock.fileno()

    async def handshake(self) -> None:
        return None

    def read_into(self, view: memoryview) -> int:
        return os.readv(self._fd, [view])

    async def wait_readable(self) -> None:
        await trio.lowlevel.wait_readable(self.sock)

    async def write(self, data: bytes | bytearray | memoryview, on_block: OnBlock = None) -> None:
        await send_all(self.sock, data, on_block)

    async def write_file(self, fd: int, offset: int, count: int, on_block: OnBlock = None) -> None:
        await sendfile(self.sock, fd, offset, count, on_block)

    def close(self) -> None:
        self.sock.close()


class SslHandshakeError(ConnectionError):
    """The TLS handshake failed: the peer is not a TLS client, or its certificate was refused."""


class SslTransportLayer:
    """TLS over the socket with a sans-IO ``ssl.SSLObject`` (see the module docstring).

    ``server_side`` for an accepted connection; a client passes ``server_hostname`` (checked
    against the broker's certificate when the context has ``check_hostname``). A server side
    with a ``principal_builder`` turns the client's certificate (None without one) into the
    connection's :attr:`principal` once the handshake is done; a builder that raises
    ``ValueError`` (no mapping rule applies) fails the handshake, as Kafka fails authentication. Post-handshake
    messages the peer's data may produce (a TLS 1.3 KeyUpdate answer) wait in the outgoing BIO
    and go out with the next write: only the writer writes to the socket, so TLS records never
    interleave. Renegotiation is disabled (``OP_NO_RENEGOTIATION`` in :mod:`.ssl_factory`).
    """

    zero_copy = False

    def __init__(
        self,
        sock: trio.socket.SocketType,
        context: ssl.SSLContext,
        *,
        server_side: bool,
        server_hostname: str | None = None,
        principal_builder: Callable[[bytes | None], KafkaPrincipal] | None = None,
    ) -> None:
        self.sock = sock
        self._principal_builder = principal_builder
        #: who the peer is by its certificate, once the handshake is done (server side)
        self.principal: KafkaPrincipal | None = None
        self._fd = sock.fileno()
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._ssl = context.wrap_bio(
            self._incoming, self._outgoing, server_side=server_side, server_hostname=server_hostname
        )
        self._eof = False
        self._received = False  # any ciphertext yet (a peer that sends nothing is no TLS failure)

    # -- handshake ------------------------------------------------------------------------------
    async def handshake(self) -> None:
        """Run the TLS handshake; ``SslHandshakeError`` when it fails (bad bytes, a refused
        certificate, a peer that leaves). The caller bounds it with a deadline."""
        while True:
            try:
                self._ssl.do_handshake()
                break
            except ssl.SSLWantReadError:
                await self._flush(None)
                await self._feed()
            except ssl.SSLError as exc:
                if self._eof and not self._received:
                    # connected and left without a byte (a port probe, a health check): not a failure
                    raise ConnectionError("closed before the TLS handshake started") from exc
                await self._flush_quietly()  # the alert telling the peer why
                raise SslHandshakeError(_describe(exc)) from exc
        await self._flush(None)
        if self._principal_builder is not None:
            try:
                self.principal = self._principal_builder(self.peer_certificate())
            except ValueError as exc:
                raise SslHandshakeError(f"no principal for the client certificate: {exc}") from exc

    async def _feed(self) -> None:
        """Move the ciphertext the socket has (waiting for some) into the incoming BIO."""
        while True:
            try:
                self._feed_nowait()
                return
            except BlockingIOError:
                await trio.lowlevel.wait_readable(self.sock)

    def _feed_nowait(self) -> None:
        data = os.read(self._fd, NET_READ)
        if data:
            self._received = True
            self._incoming.write(data)
        else:
            self._eof = True
            self._incoming.write_eof()

    async def _flush_quietly(self) -> None:
        try:
            with trio.move_on_after(1):
                await self._flush(None)
        except OSError:
            pass

    def peer_certificate(self) -> bytes | None:
        """The peer's certificate (DER) once the handshake is done, if it sent one and it was
        verified; None otherwise (``ssl.client.auth=none``, or a client without a certificate)."""
        try:
            return self._ssl.getpeercert(binary_form=True)
        except ValueError:  # the handshake has not completed
            return None

    @property
    def protocol(self) -> str | None:
        """The negotiated TLS version (``TLSv1.3``), for logs."""
        return self._ssl.version()

    # -- reading --------------------------------------------------------------------------------
    def read_into(self, view: memoryview) -> int:
        size = len(view)
        while True:
            try:
                # with a buffer, read() returns the count (typeshed says bytes)
                return self._ssl.read(size, view)  # type: ignore[arg-type,return-value]
            except ssl.SSLWantReadError:
                if self._eof:
                    return 0
                self._feed_nowait()  # BlockingIOError: nothing decrypted, nothing on the socket
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                return 0  # close_notify, or a peer that just closed its socket (as most clients do)
            except ssl.SSLError as exc:
                raise ConnectionError(f"TLS: {_describe(exc)}") from exc

    async def wait_readable(self) -> None:
        await trio.lowlevel.wait_readable(self.sock)

    # -- writing --------------------------------------------------------------------------------
    async def write(self, data: bytes | bytearray | memoryview, on_block: OnBlock = None) -> None:
        view = memoryview(data)
        for start in range(0, len(view), WRITE_CHUNK):
            self._ssl.write(view[start : start + WRITE_CHUNK])
            await self._flush(on_block)

    async def write_file(self, fd: int, offset: int, count: int, on_block: OnBlock = None) -> None:
        while count > 0:
            data = os.pread(fd, min(count, WRITE_CHUNK), offset)
            if not data:
                raise FrameError(f"file ended {count} bytes early while sending it over TLS")
            await self.write(data, on_block)
            offset += len(data)
            count -= len(data)

    async def _flush(self, on_block: OnBlock) -> None:
        while self._outgoing.pending:
            await send_all(self.sock, self._outgoing.read(), on_block)

    def close(self) -> None:
        """Send close_notify if the socket takes it at once (as Kafka does), then close."""
        try:
            self._ssl.unwrap()
        except (ssl.SSLError, ValueError):
            pass
        pending = self._outgoing.read()
        if pending:
            try:
                os.write(self._fd, pending)
            except OSError:
                pass
        self.sock.close()


async def write_frame(transport: TransportLayer, frame: bytes | bytearray, on_block: OnBlock = None) -> None:
    """Write a Kafka frame with its size prefix through ``transport`` (small frames in one write)."""
    if len(frame) <= 64 * 1024:
        await transport.write(_SIZE.pack(len(frame)) + frame, on_block)
    else:
        await transport.write(_SIZE.pack(len(frame)), on_block)
        await transport.write(frame, on_block)


def _describe(exc: ssl.SSLError) -> str:
    """``[SSL: WRONG_VERSION_NUMBER] wrong version number`` -> ``wrong version number
    (WRONG_VERSION_NUMBER)``: OpenSSL's words first, without the file and line noise."""
    reason = getattr(exc, "reason", None)
    verify = getattr(exc, "verify_message", None)
    text = verify or (exc.args[1] if len(exc.args) > 1 and isinstance(exc.args[1], str) else str(exc))
    text = text.split("] ", 1)[-1].split(" (_ssl.c", 1)[0]
    return f"{text} ({reason})" if reason and reason.lower().replace("_", " ") != text.lower() else text


__all__ = [
    "NET_READ",
    "WRITE_CHUNK",
    "PlaintextTransportLayer",
    "SslHandshakeError",
    "SslTransportLayer",
    "TransportLayer",
    "write_frame",
]
