"""Helpers for metadata plugins whose client library runs its own threads (kazoo, etcd3/gRPC).

Such libraries call back on their threads: a session listener, a watch callback. Those callbacks
must never block (kazoo stalls every other callback meanwhile) and must never touch trio objects
directly. :class:`ThreadWakeup` turns a foreign-thread callback into a trio event through the
run's ``TrioToken`` (``run_sync_soon`` never blocks), and :class:`SessionStateFeed` broadcasts
``SessionState`` changes to any number of ``session_states()`` iterators.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import trio

from .errors import OdradekError
from .interfaces import SessionState

log = logging.getLogger(__name__)


class MetadataUnavailable(OdradekError):
    """The coordination service cannot be reached (or the session is closed).

    For a write the outcome is unknown: the caller re-reads once the session is CONNECTED again.
    """


class MetadataSessionLost(MetadataUnavailable):
    """The session expired while a request used it (etcd: its lease is gone): its ephemerals
    are gone and a write with it was refused. The store has reported LOST and starts a new
    session; wait for CONNECTED and try again (a broker registers again in the new session)."""


class MetadataStoreError(OdradekError):
    """The coordination service refused a request for a reason of its own (one line: its status
    and details), not because it is unreachable."""


class MetadataTxnTooLarge(MetadataStoreError):
    """A transaction past what the store takes in one (etcd's --max-txn-ops, ZooKeeper's
    jute.maxbuffer), refused before it was sent: nothing of it was written. The message says
    which limit and which settings raise it."""


#: Session changes a subscriber may have unread before it is cut off (a consumer that far behind
#: is stuck; a slow consumer must not make the feed grow without bound).
STATE_BUFFER = 64


class ThreadWakeup:
    """A trio event that foreign threads can set; ``wait`` re-arms it.

    Created inside a trio run (it captures the run's token). ``wake_threadsafe`` may be called
    from any thread, including after the run ended (then it does nothing).
    """

    def __init__(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        self._event = trio.Event()

    def wake(self) -> None:
        """Set the event (trio thread only)."""
        self._event.set()

    def wake_threadsafe(self, *_args: object) -> None:
        """Set the event from any thread without blocking (extra arguments are ignored, so this
        can be handed to a library as a watch callback directly)."""
        try:
            self._token.run_sync_soon(self._event.set)
        except trio.RunFinishedError:
            pass

    @property
    def is_set(self) -> bool:
        return self._event.is_set()

    async def wait(self) -> None:
        """Wait until woken, then re-arm for the next wake-up."""
        await self._event.wait()
        self._event = trio.Event()


class SessionStateFeed:
    """The current ``SessionState`` plus a broadcast of its changes to every subscriber.

    ``set`` runs in the trio thread (foreign threads use ``set_threadsafe``). Each subscriber's
    iterator starts with the state current when it first iterates, then yields every change.
    """

    def __init__(self, initial: SessionState = SessionState.LOST) -> None:
        self.state = initial
        self._subscribers: set[trio.MemorySendChannel[SessionState]] = set()
        self._wakeups: set[ThreadWakeup] = set()
        self._token: trio.lowlevel.TrioToken | None = None

    def bind(self) -> None:
        """Capture the current trio run, so foreign threads can call ``set_threadsafe``."""
        self._token = trio.lowlevel.current_trio_token()

    def set(self, state: SessionState) -> None:
        if state is self.state:
            return
        self.state = state
        for send in list(self._subscribers):
            try:
                send.send_nowait(state)
            except trio.WouldBlock:
                log.error("session state subscriber is %d changes behind; closing its iterator", STATE_BUFFER)
                self._subscribers.discard(send)
                send.close()
            except trio.BrokenResourceError:
                self._subscribers.discard(send)
        for wakeup in list(self._wakeups):
            wakeup.wake()

    def set_threadsafe(self, state: SessionState) -> None:
        """``set`` from a foreign thread, without blocking it."""
        if self._token is None:
            return
        try:
            self._token.run_sync_soon(self.set, state)
        except trio.RunFinishedError:
            pass

    def add_wakeup(self, wakeup: ThreadWakeup) -> None:
        """Wake ``wakeup`` on every state change (waiters that must re-check after a reconnect)."""
        self._wakeups.add(wakeup)

    def remove_wakeup(self, wakeup: ThreadWakeup) -> None:
        self._wakeups.discard(wakeup)

    def close(self) -> None:
        """End every subscriber's iterator (after the final state was delivered)."""
        for send in self._subscribers:
            send.close()
        self._subscribers.clear()

    async def subscribe(self) -> AsyncIterator[SessionState]:
        """The current state, then each change, until ``close``."""
        send, receive = trio.open_memory_channel[SessionState](STATE_BUFFER)
        self._subscribers.add(send)
        try:
            yield self.state
            async with receive:
                async for state in receive:
                    yield state
        finally:
            self._subscribers.discard(send)
            send.close()
