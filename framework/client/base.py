"""What every async client object shares: config, plugins, a network client and a nursery.

An async client is used as ``async with AsyncProducer(...) as producer:``. Entering opens the
client's nursery (its background tasks -- metadata refresh, connection readers, the producer's
sender, the consumer's fetcher and heartbeat -- live there, so a failure in one of them
surfaces in the ``async with`` body instead of vanishing); leaving closes the client: gracefully
when the body finished normally, abruptly when it raised.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from types import TracebackType
from typing import Any, ClassVar

import trio

from ..errors import ErrorCode, KafkaError, OdradekError
from ..interfaces import Connector
from ..manager import Plugins, default_plugins
from .config import ClientConfig
from .network import NetworkClient


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    out: list[BaseException] = []
    for e in group.exceptions:
        out.extend(_leaves(e) if isinstance(e, BaseExceptionGroup) else [e])
    return out


class ClientClosedError(OdradekError):
    """The client was closed (or never started) and cannot do what was asked."""


class AsyncClient:
    """Base of AsyncProducer, AsyncConsumer and AsyncAdmin (see module doc)."""

    role: ClassVar[str] = ""

    def __init__(
        self,
        config: Mapping[str, Any] | None = None,
        *,
        plugins: Plugins | None = None,
        connector: Connector | None = None,
        **kwargs: Any,
    ) -> None:
        self.config = ClientConfig(self.role, config, **kwargs)
        self.plugins = plugins or default_plugins()
        self.network = NetworkClient(self.config, self.plugins, connector=connector)
        self._stack = contextlib.AsyncExitStack()
        self._nursery: trio.Nursery | None = None
        self._closed = False

    async def __aenter__(self) -> Any:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        close_error: BaseException | None = None
        try:
            if exc_type is None:
                await self.close()
            else:
                with trio.CancelScope(shield=True):
                    await self.close(timeout=0)
        except BaseException as e:  # reported after the nursery is closed, even a Cancelled:
            # an `async with` body that ends inside a cancelled scope (a nursery cancelled after
            # its last await) cancels close() too; leaving without closing the nursery would
            # corrupt trio's stack of nurseries ("Nursery stack corrupted")
            close_error = e
        try:
            # True when the nursery absorbed the body's exception (the Cancelled of close())
            suppressed = await self._stack.__aexit__(exc_type, exc, tb)
        except BaseExceptionGroup as group:
            # the nursery wraps whatever crossed it; give the user the plain exception
            leaves = _leaves(group)
            if exc is not None and all(leaf is exc for leaf in leaves):
                return None
            if len(leaves) == 1:
                raise leaves[0] from None
            raise
        if close_error is not None:
            raise close_error
        return suppressed

    async def start(self) -> None:
        """Open the nursery and start background tasks (``async with`` does this)."""
        if self._nursery is not None:
            return
        self._nursery = await self._stack.enter_async_context(trio.open_nursery())
        self.network.start(self._nursery)
        await self._on_start(self._nursery)

    async def _on_start(self, nursery: trio.Nursery) -> None:
        """Subclasses start their own tasks here."""

    async def close(self, timeout: float | None = None) -> None:
        """Stop: subclasses finish their work first (within ``timeout`` seconds, 0: abort)."""
        if self._closed:
            return
        self._closed = True
        try:
            await self._on_close(timeout)
        finally:
            await self.network.aclose()
            if self._nursery is not None:
                self._nursery.cancel_scope.cancel()

    async def _on_close(self, timeout: float | None) -> None:
        """Subclasses flush, commit or leave here."""

    def _check_open(self) -> None:
        if self._closed:
            raise ClientClosedError(f"this {self.role} is closed")
        if self._nursery is None:
            raise ClientClosedError(f"this {self.role} is not started: use 'async with' (or await start())")

    def _default_timeout(self, timeout: float | None) -> float:
        return self.config["default.api.timeout.ms"] / 1000.0 if timeout is None else timeout

    @contextlib.contextmanager
    def _api_deadline(self, timeout: float | None, what: str) -> Iterator[None]:
        """Bound a blocking call by ``timeout`` seconds (``default.api.timeout.ms`` when None).
        Expiry raises a KafkaError with REQUEST_TIMED_OUT saying what timed out, as Kafka's
        clients raise their TimeoutException: callers see the client's errors, never trio's."""
        seconds = self._default_timeout(timeout)
        try:
            with trio.fail_after(seconds):
                yield
        except trio.TooSlowError:
            message = f"{what}: timed out after {seconds * 1000:.0f} ms"
            raise KafkaError(message, code=ErrorCode.REQUEST_TIMED_OUT) from None
