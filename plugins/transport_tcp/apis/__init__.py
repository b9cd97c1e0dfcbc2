"""KafkaApis: request handlers by API key, one module per area, merged by the dispatcher.

Each module in :data:`HANDLER_MODULES` exports ``HANDLERS: Mapping[int, Handler]``. A handler
translates a decoded request (kio dataclass, or ``ProduceRequestData``) into calls on the broker
core (:class:`odradek.broker.api.Broker`) and the core's results back into a response object;
it never touches a socket. The dispatcher decodes, calls the handler and encodes, so the
connection only moves bytes. Adding an area (consumer groups) is one module and one line here.

ApiVersions advertises exactly the APIs that have a handler (see
:func:`odradek.protocol.advertised_versions`).
"""

from __future__ import annotations

import importlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias

import trio

from odradek.broker.quotas import REQUEST_QUOTA_EXEMPT
from odradek.config import Config, ConfigError
from odradek.errors import ErrorCode, InvalidRequest, KafkaError, OdradekError, UnsupportedVersion
from odradek.interfaces import Endpoint
from odradek.metrics import BrokerMetrics
from odradek.principal import ANONYMOUS, KafkaPrincipal
from odradek.protocol import (
    ApiKey,
    FetchEnvelope,
    FetchResponseData,
    RequestHeader,
    VersionRange,
    advertised_versions,
    api_name,
    api_versions_fallback,
    build_fetch_envelope,
    decode_request,
    encode_response,
    is_supported,
)
from odradek.sessions import MetadataUnavailable

from ._kio import error_of, with_throttle_time
from .authz import authorized_call
from .error_responses import error_response

log = logging.getLogger(__name__)

#: Handler modules, merged in this order (a key defined twice is an error).
HANDLER_MODULES: tuple[str, ...] = (
    "odradek.plugins.transport_tcp.apis.core",
    "odradek.plugins.transport_tcp.apis.admin",
    "odradek.plugins.transport_tcp.apis.groups",
    "odradek.plugins.transport_tcp.apis.txn",
    "odradek.plugins.transport_tcp.apis.cluster",
    "odradek.plugins.transport_tcp.apis.acls",
    "odradek.plugins.transport_tcp.apis.scram",
    "odradek.plugins.transport_tcp.apis.quotas",
)


@dataclass(frozen=True, slots=True)
class RequestContext:
    """What a handler knows about the request besides its body."""

    header: RequestHeader
    broker: Any  # odradek.broker.api.Broker
    config: Config
    listener: Endpoint
    peer: str
    advertised: Mapping[int, VersionRange]
    #: gives the request's frame back to the broker's request memory (``queued.max.request.bytes``)
    #: once nothing needs its bytes: a Produce calls it after its local append, before any wait
    #: for acks; None when the transport does not count request memory
    release_frame: Callable[[], None] | None = None
    #: who sent it: the connection's principal (``User:ANONYMOUS`` until a security layer
    #: authenticates the peer)
    principal: KafkaPrincipal = ANONYMOUS
    #: mutes the connection for this many ms once its response is on its way (KIP-219): a
    #: handler whose client exceeded its quota calls it; None when the transport cannot mute
    throttle: Callable[[int], None] | None = None
    #: the request's size on the wire, header and body without the size prefix (Kafka's
    #: ``request.sizeInBytes``): what a Produce counts against ``producer_byte_rate``
    request_size: int = 0
    #: the request quota's meter of this request (None: no ``request_percentage`` quota, or an
    #: exempt API); a handler that must know the request throttle before it answers (Fetch)
    #: records it itself with :meth:`RequestTime.record`, and the dispatcher then does not
    request_time: RequestTime | None = None

    @property
    def api_version(self) -> int:
        return self.header.api_version


class RequestTime:
    """One request's thread time, counted against its client's ``request_percentage`` once
    (KIP-124): by the dispatcher after the handler, or earlier by a handler whose answer depends
    on the throttle (Kafka's Fetch answers a throttled consumer without records, KIP-219)."""

    __slots__ = ("_start", "client_id", "meter", "quotas", "recorded", "task", "user")

    def __init__(self, quotas: Any, meter: Any, user: str, client_id: str) -> None:
        self.quotas = quotas
        self.meter = meter
        self.user = user
        self.client_id = client_id
        self.task = trio.lowlevel.current_task()
        self._start: float = meter.task_time(self.task)
        self.recorded = False

    def record(self, *, count: bool = True) -> int:
        """Count the thread time so far (nothing on a second call); the throttle time in ms it
        earned, which the caller applies (the response's ``throttle_time_ms``, the mute). With
        ``count`` False the throttle is left out of the request quota's throttle metrics: the
        caller counts it only if it is the time the client waits."""
        if self.recorded:
            return 0
        self.recorded = True
        seconds = self.meter.task_time(self.task) - self._start
        throttle_ms: int = self.quotas.record_request_time(self.user, self.client_id, seconds, count=count)
        return throttle_ms


HandlerFn = Callable[[RequestContext, Any], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class Handler:
    """A request handler; its coroutine returns a response object, or None for no response.

    ``ordered`` handlers run one after another in arrival order on a connection (they change
    state: Produce must append pipelined batches in sequence order); the others run
    concurrently once every earlier ordered request of the connection has finished, so a
    pipelined Metadata or Fetch never sees the state from before an earlier Produce.
    """

    api_key: int
    handle: HandlerFn
    ordered: bool = True


class CloseConnection(OdradekError):
    """Raised by a handler whose only answer is closing the connection (Kafka's
    ``requestChannel.closeConnection``): a Produce with acks=0 that failed somewhere has no
    response to carry the error, so the client notices by the close and refreshes its metadata.
    The connection writes the responses to earlier requests first, reads nothing further, and
    logs the message at INFO."""


#: What the dispatcher returns for a request: a frame, a Fetch envelope, or nothing (acks=0).
Outcome: TypeAlias = bytes | FetchEnvelope | None


def load_handlers(modules: tuple[str, ...] = HANDLER_MODULES) -> dict[int, Handler]:
    """Merge the ``HANDLERS`` of every module, refusing an api key handled twice."""
    merged: dict[int, Handler] = {}
    owner: dict[int, str] = {}
    for name in modules:
        module = importlib.import_module(name)
        for key, handler in module.HANDLERS.items():
            if key in merged:
                raise ValueError(f"api {api_name(key)} is handled by both {owner[key]} and {name}")
            merged[key] = handler
            owner[key] = name
    return merged


#: Requests whose frame is at least this big are decoded, and their responses encoded, in a
#: worker thread. kio's codec is pure Python, about 10 us per array entry each way: a 1 MB
#: request naming 100k partitions or ids would otherwise hold the event loop -- every other
#: client of the broker -- for seconds. In a thread, the GIL's switch interval (5 ms) lets the
#: loop go on serving. Produce (raw record bytes, a header-only decoder) and Fetch (a sendfile
#: envelope) stay on the loop: their big frames are cheap to decode.
OFFLOAD_FRAME_BYTES = 64 * 1024
_ON_LOOP = frozenset({ApiKey.PRODUCE, ApiKey.FETCH})


def _consumer_protocol_enabled(config: Config) -> bool:
    try:
        protocols = config["group.coordinator.rebalance.protocols"]
    except (KeyError, ConfigError):  # a config stand-in without the key
        return True
    return "consumer" in {str(p).lower() for p in protocols}


class Dispatcher:
    """Decode -> handle -> encode for one listener of one broker."""

    def __init__(
        self,
        broker: Any,
        config: Config,
        listener: Endpoint,
        handlers: Mapping[int, Handler] | None = None,
    ) -> None:
        self.broker = broker
        self.config = config
        self.listener = listener
        self.handlers = dict(load_handlers() if handlers is None else handlers)
        if not _consumer_protocol_enabled(config):
            # KIP-848 off (group.coordinator.rebalance.protocols): its APIs are not advertised,
            # as Kafka's ApiVersions leaves them out, so clients keep to the classic protocol
            for key in (ApiKey.CONSUMER_GROUP_HEARTBEAT, ApiKey.CONSUMER_GROUP_DESCRIBE):
                self.handlers.pop(key, None)
        #: the broker's counters: requests per API and version, and their handling time (a
        #: broker stand-in without them, as tests build, gets counters of its own)
        metrics = getattr(broker, "metrics", None)
        self.metrics: BrokerMetrics = metrics if isinstance(metrics, BrokerMetrics) else BrokerMetrics()
        self.advertised = advertised_versions(self.handlers)
        #: the broker's client quotas (None for a stand-in without them): the request quota
        self.quotas: Any = getattr(broker, "quotas", None)

    def handler_for(self, header: RequestHeader) -> Handler | None:
        """The handler for a request; None for ApiVersions fallbacks, which need no handler."""
        return self.handlers.get(header.api_key)

    def check(self, header: RequestHeader) -> None:
        """Raise for requests the broker will not answer (the connection is then closed).

        Kafka closes the connection on an unknown API key or an unsupported version of any API
        but ApiVersions, which gets the v0 fallback instead.
        """
        if header.api_key == ApiKey.API_VERSIONS:
            return
        if header.api_key not in self.handlers:
            raise InvalidRequest(f"unsupported api key {header.api_key}")
        if not is_supported(header.api_key, header.api_version):
            raise UnsupportedVersion(f"{api_name(header.api_key)} v{header.api_version} is not supported")

    async def process(
        self,
        header: RequestHeader,
        frame: bytearray,
        peer: str,
        *,
        release_frame: Callable[[], None] | None = None,
        principal: KafkaPrincipal = ANONYMOUS,
        throttle: Callable[[int], None] | None = None,
    ) -> Outcome:
        """The wire response to one request. Raises on requests that must close the connection.

        ``release_frame`` (idempotent) gives the frame's request memory back: once the request
        is decoded, as Kafka's request channel does, except for a Produce, whose records are
        read from the frame until they are appended (the handler calls it then, before waiting
        for acks). A request parked in a purgatory or a group rebalance then holds no request
        memory, which would otherwise keep out the very requests it waits for (a follower's
        Fetch that moves the high watermark). ``principal`` is the connection's, handed to the
        handler in its context, as is ``throttle`` (the connection's mute, see
        :attr:`RequestContext.throttle`). Counted in the broker's request metrics with the time
        it took, whatever its outcome."""
        start = time.perf_counter()
        key, version = header.api_key, header.api_version
        meter = None if self.quotas is None else self.quotas.meter
        request_time = (
            None
            if meter is None or key in REQUEST_QUOTA_EXEMPT
            else RequestTime(self.quotas, meter, principal.name, header.client_id or "")
        )
        try:
            if key == ApiKey.API_VERSIONS and not is_supported(key, version):
                return api_versions_fallback(header.correlation_id, self.advertised)
            self.check(header)
            offload = len(frame) >= OFFLOAD_FRAME_BYTES and key not in _ON_LOOP
            if offload:
                request = await trio.to_thread.run_sync(decode_request, key, version, frame, header.body_offset)
            else:
                request = decode_request(key, version, frame, header.body_offset)
            if release_frame is not None and key != ApiKey.PRODUCE:
                release_frame()
            ctx = RequestContext(
                header, self.broker, self.config, self.listener, peer, self.advertised, release_frame, principal,
                throttle, len(frame), request_time,
            )  # fmt: skip
            try:
                authorizer = getattr(self.broker, "authorizer", None)
                if authorizer is None:
                    response = await self.handlers[key].handle(ctx, request)
                else:  # Kafka's KafkaApis checks (.authz): a denied request never reaches its handler
                    response = await authorized_call(ctx, authorizer, self.handlers[key].handle, request)
            except CloseConnection:
                raise
            except Exception as exc:
                response = self._answer_failure(header, request, exc, peer)
            if response is None:
                return None
            if request_time is not None and not request_time.recorded:
                response = self._request_quota(ctx, request, response, request_time)
            try:
                if offload:
                    return await trio.to_thread.run_sync(_encode, header, response)
                return _encode(header, response)
            except Exception as exc:
                answer = self._answer_unencodable(header, request, exc, peer)
            return _encode(header, answer)
        finally:
            self.metrics.request_done(key, version, time.perf_counter() - start)

    def _request_quota(self, ctx: RequestContext, request: Any, response: Any, request_time: RequestTime) -> Any:
        """Count the request's thread time against the client's ``request_percentage`` (KIP-124);
        over it, the response carries the throttle time and the connection is muted for it. A
        follower's Fetch is replication, exempt as in Kafka (a consumer's Fetch records its own:
        see ``apis.core``)."""
        if ctx.header.api_key == ApiKey.FETCH and getattr(request, "replica_id", -1) >= 0:
            return response
        throttle_ms = request_time.record()
        if throttle_ms <= 0:
            return response
        if ctx.throttle is not None:
            ctx.throttle(throttle_ms)
        return with_throttle_time(response, throttle_ms)

    def _answer_unencodable(self, header: RequestHeader, request: Any, exc: Exception, peer: str) -> Any:
        """The error response in place of a response that cannot be encoded (a value the core
        returned is out of its field's range, e.g. an offset beyond int64 read from a hostile
        batch): the client gets UNKNOWN_SERVER_ERROR in that response's place in the pipeline
        and the connection carries on, as for a failing handler. Logged once, as one ERROR line
        naming the API and the reason (the traceback would only show the encoder). If the error
        response cannot be built either, ``exc`` is raised and the connection closes."""
        code = ErrorCode.UNKNOWN_SERVER_ERROR
        log.error(
            "%s v%d (correlation id %d) from %s: the response cannot be encoded (%s: %s); answered %s",
            api_name(header.api_key),
            header.api_version,
            header.correlation_id,
            peer,
            _qualified_name(type(exc)),
            exc,
            code.name,
        )
        try:
            return error_response(header.api_key, header.api_version, request, code, "unexpected server error")
        except Exception as build_error:
            raise exc from build_error

    def _answer_failure(self, header: RequestHeader, request: Any, exc: Exception, peer: str) -> Any:
        """The error response for a request whose handler raised ``exc`` (Kafka's
        ``handleError``): its Kafka error code, UNKNOWN_SERVER_ERROR for anything else, in every
        error field. A Produce with acks=0 has no response to carry it, and a request whose
        error response cannot be built has no other way to fail: both re-raise, which closes
        the connection (as Kafka does)."""
        what = f"{api_name(header.api_key)} v{header.api_version} (correlation id {header.correlation_id}) from {peer}"
        code = error_of(exc)
        expected = isinstance(exc, (KafkaError, MetadataUnavailable))
        if expected:  # a condition, not a bug: one line, no traceback
            log.warning("%s failed: %s (answered %s)", what, exc, code.name)
        else:
            log.exception("%s failed unexpectedly (answered %s)", what, code.name)
        if header.api_key == ApiKey.PRODUCE and getattr(request, "acks", 1) == 0:
            raise exc
        message = f"{type(exc).__name__}: {exc}" if expected else "unexpected server error"
        try:
            return error_response(header.api_key, header.api_version, request, code, message)
        except Exception as build_error:
            raise exc from build_error


def _encode(header: RequestHeader, response: Any) -> bytes | FetchEnvelope:
    """The wire form of a handler's response: a Fetch envelope, or a frame without its size."""
    key, version = header.api_key, header.api_version
    if isinstance(response, FetchResponseData):
        try:
            return build_fetch_envelope(version, header.correlation_id, response)
        except BaseException:
            _release_records(response)
            raise
    return encode_response(key, version, header.correlation_id, response)


def _qualified_name(cls: type) -> str:
    """``struct.error`` rather than a bare ``error``; builtins by their name alone."""
    return cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"


def _release_records(response: FetchResponseData) -> None:
    """Release every record slice of a Fetch response that will not be sent."""
    for topic in response.responses:
        for partition in topic.partitions:
            records = partition.records
            if records is not None and not isinstance(records, bytes | bytearray | memoryview):
                records.release()


__all__ = [
    "HANDLER_MODULES",
    "CloseConnection",
    "Dispatcher",
    "Handler",
    "HandlerFn",
    "Outcome",
    "RequestContext",
    "RequestTime",
    "load_handlers",
]
