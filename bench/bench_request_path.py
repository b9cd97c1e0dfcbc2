"""Micro-benchmark of the broker's per-request work without sockets: where a request's microseconds go.

End-to-end latency at a fixed rate is bounded by the broker's cost per *request* (librdkafka with
linger 0 sends nearly one request per record), and throughput with large batches by its cost per
*byte*. This script times each stage of the produce and fetch paths in-process, with the real
BrokerServer (segment storage, meta_local) behind a listener that serves nothing:

- ``header+decode``: ``parse_request_header`` + ``decode_request`` of a Produce frame;
- ``core.produce``: validate + append (+ HW) through the core facade (``BrokerCore.produce``);
- ``dispatch produce``: ``Dispatcher.process`` -- decode, handler, core, response encode;
- ``core.fetch``: the core facade's read of one partition (a pinned file range, nothing sent);
- ``dispatch fetch``: the same through ``Dispatcher.process`` (decode, handler, envelope).

Each for a one-record batch (per-request overhead) and a ~1 MB batch (per-byte cost), in CPU
microseconds of this process (user + system), so other load on the machine does not count.
With ``--acl`` the broker runs the built-in ACL authorizer and the requests come from
``User:bench``, whom ACLs allow to write and read the topic: the difference is what
authorization costs a request. With ``--quota other`` some other client id has a
``producer_byte_rate`` and ``consumer_byte_rate`` quota, so the benchmark's client, which has none,
is recorded for the metrics as Kafka records every client once a quota type is in use;
``--quota own`` gives it a quota of its own (too high to throttle): the differences from no quota
are what that recording and the enforcement cost a request.
Run: ``.venv/bin/python bench/bench_request_path.py [--runs 5] [--acl] [--quota other|own]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import types
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import trio

from odradek import records
from odradek.broker.api import CreatableTopic, FetchPartition, IsolationLevel
from odradek.broker.server import BrokerServer
from odradek.config import load_config
from odradek.hookspecs import hookimpl
from odradek.interfaces import Endpoint, TopicPartition, TransportFactory
from odradek.manager import Plugins, build_plugin_manager
from odradek.protocol import encode_request, parse_request_header
from odradek.protocol.codec import decode_request
from odradek.protocol.produce import PartitionProduceData, ProduceRequestData, TopicProduceData

sys.path.insert(0, str(Path(__file__).resolve().parent))
from wireload import _fetch_request


class _NoListener:
    def __init__(self, config: Any, broker: Any, endpoint: Endpoint) -> None:
        self.endpoint = endpoint

    async def serve(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        ep = self.endpoint
        task_status.started([Endpoint(ep.name, ep.host, ep.port or 9092, ep.security_protocol)])
        await trio.sleep_forever()


_TRANSPORT = types.SimpleNamespace(
    __name__="bench_no_transport",
    odradek_register_transports=hookimpl(
        lambda: [TransportFactory("none", ["PLAINTEXT"], _NoListener, lambda c: None, "bench: no sockets")]
    ),
)


def _produce_frame(topic: str, batch: bytes) -> bytearray:
    request = ProduceRequestData(1, 30_000, [TopicProduceData(topic, [PartitionProduceData(0, bytearray(batch))])])
    return bytearray(encode_request(request, correlation_id=1, client_id="bench"))


def _batch(count: int, size: int) -> bytes:
    value = b"x" * size
    return records.build_batch([(None, value, [], None)] * count)


async def _time(fn: Callable[[], Awaitable[object]], min_time: float) -> float:
    """CPU microseconds per call of ``fn`` (awaited), over at least ``min_time`` CPU seconds.

    Process CPU time, not wall time: on a shared machine the wall clock also counts the time
    other processes held the core.
    """
    await fn()
    calls = 0
    start = time.process_time()
    while (elapsed := time.process_time() - start) < min_time:
        await fn()
        calls += 1
    return elapsed / calls * 1e6


async def run(
    runs: int, min_time: float, acl: bool = False, quota: str = "none"
) -> list[tuple[str, float, float, float]]:
    from odradek.plugins.transport_tcp.apis import Dispatcher
    from odradek.principal import ANONYMOUS, KafkaPrincipal
    from odradek.security.acl import AclOperation, ResourceType
    from odradek.testing.authorizer import acl as binding

    out: list[tuple[str, float, float, float]] = []
    with tempfile.TemporaryDirectory(prefix="odradek-bench-path-") as tmp:
        extra: list[Any] = [
            "odradek.plugins.compress.plugin",
            "odradek.plugins.storage_segment.plugin",
            "odradek.plugins.meta_local.plugin",
            _TRANSPORT,
        ]
        if acl:
            extra.append("odradek.security.plugin")
        plugins = Plugins(build_plugin_manager(entry_points_enabled=False, extra=extra))
        overrides = {"log.dirs": tmp, "listeners": "PLAINTEXT://127.0.0.1:0"}
        if acl:
            overrides["authorizer.class.name"] = "acl"
        config = load_config(env={}, overrides=overrides, plugins=plugins)
        principal = KafkaPrincipal("User", "bench") if acl else ANONYMOUS
        server = BrokerServer(config, plugins)
        async with trio.open_nursery() as nursery:
            await nursery.start(server.serve)
            core = server.core
            assert core is not None
            await core.create_topics([CreatableTopic("bench", 1, 1)], 5000, False)
            if core.authorizer is not None:
                allowed = [binding(ResourceType.TOPIC, "bench", "User:bench", op) for op in (AclOperation.ALL,)]
                await core.authorizer.create_acls(principal_context(principal), allowed)
            if quota != "none":
                from odradek.broker.quota_configs import CONSUMER_BYTE_RATE, PRODUCER_BYTE_RATE, QuotaEntity

                # the produce and fetch frames' client ids, or another one
                client_ids = ("bench", "odradek-wireload") if quota == "own" else ("someone-else",)
                limits = {PRODUCER_BYTE_RATE: 1e15, CONSUMER_BYTE_RATE: 1e15}
                for client_id in client_ids:
                    core.quotas.configs.set_entity(QuotaEntity(None, client_id), limits)
            tp = TopicPartition("bench", 0)
            dispatcher = Dispatcher(core, config, Endpoint("PLAINTEXT", "127.0.0.1", 9092, "PLAINTEXT"))
            for label, batch in (("1 record", _batch(1, 100)), ("~1 MB", _batch(9000, 100))):
                frame = _produce_frame("bench", batch)
                header = parse_request_header(frame)

                async def header_decode(frame: bytearray = frame) -> object:
                    h = parse_request_header(frame)
                    return decode_request(h.api_key, h.api_version, frame, h.body_offset)

                async def core_produce(batch: bytes = batch) -> object:
                    return await core.produce(1, 30_000, {tp: bytearray(batch)})

                async def dispatch_produce(frame: bytearray = frame, header: Any = header) -> object:
                    return await dispatcher.process(header, bytearray(frame), "bench", principal=principal)

                for name, fn in (
                    (f"header+decode, {label}", header_decode),
                    (f"core.produce, {label}", core_produce),
                    (f"dispatch produce, {label}", dispatch_produce),
                ):
                    times = [await _time(fn, min_time) for _ in range(runs)]
                    out.append((name, statistics.median(times), min(times), max(times)))
            # fetch from the start of the log: one small batch, then ~1 MB of batches
            for label, max_bytes in (("one batch", 200), ("~1 MB", 1_048_576)):
                frame = bytearray(_fetch_request("bench", [0], 7, max_bytes)[4:])
                header = parse_request_header(frame)

                async def core_fetch(max_bytes: int = max_bytes) -> object:
                    parts = [FetchPartition(tp, 0, max_bytes)]
                    results = await core.fetch(-1, 0, 0, max_bytes, IsolationLevel.READ_UNCOMMITTED, parts)
                    for r in results.values():
                        if r.records is not None:
                            r.records.release()
                    return results

                times = [await _time(core_fetch, min_time) for _ in range(runs)]
                out.append((f"core.fetch, {label}", statistics.median(times), min(times), max(times)))

                async def dispatch_fetch(frame: bytearray = frame, header: Any = header) -> object:
                    envelope = await dispatcher.process(header, frame, "bench", principal=principal)
                    envelope.release()  # type: ignore[union-attr]
                    return envelope

                times = [await _time(dispatch_fetch, min_time) for _ in range(runs)]
                out.append((f"dispatch fetch, {label}", statistics.median(times), min(times), max(times)))
            nursery.cancel_scope.cancel()
    return out


def principal_context(principal: Any) -> Any:
    from odradek.security.authorizer import RequestContext

    return RequestContext(principal)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--min-time", type=float, default=0.3)
    parser.add_argument("--acl", action="store_true", help="with the ACL authorizer (requests as User:bench)")
    parser.add_argument(
        "--quota", choices=("none", "other", "own"), default="none", help="byte-rate quotas (see the module doc)"
    )
    args = parser.parse_args(argv)
    results = trio.run(run, args.runs, args.min_time, args.acl, args.quota)
    print(f"{'stage':36} {'median us':>10} {'min..max':>18}")
    for name, med, lo, hi in results:
        print(f"{name:36} {med:10.1f} {lo:8.1f}..{hi:<8.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
