"""A wire-level load generator: pipelined Produce of one pre-built batch, and Fetch that never decodes records.

Why: on two cores kcat itself tops out near a million 100-byte records/s (bench/run.py measures
this ceiling against librdkafka's mock cluster), so against a fast broker kcat measures kcat. This
generator does no per-record work at all: Produce sends the same pre-encoded ~1 MB request (only
the correlation id changes) with up to ``--inflight`` requests outstanding, as librdkafka does; Fetch
reads each response into one reusable buffer with ``recv_into`` and walks only the 12-byte batch
headers to find the next offset and count records. What it measures is the broker's ceiling.

Run: ``.venv/bin/python bench/wireload.py produce|fetch --bootstrap HOST:PORT --topic T --records N
[--record-size 100] [--partitions 1] [--acks 1] [--batch-bytes 1000000] [--inflight 5]``; prints JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import struct
import time
from collections import deque

from odradek import records as R
from odradek.protocol import encode_request, encode_request_header
from odradek.protocol.produce import PartitionProduceData, ProduceRequestData, TopicProduceData

_I32 = struct.Struct(">i")
_BATCH_HEAD = struct.Struct(">qi")  # base offset, batch length
_LAST_DELTA = struct.Struct(">i")  # lastOffsetDelta at batch byte 23
_RECORD_COUNT = struct.Struct(">i")  # recordCount at batch byte 57
PRODUCE_VERSION = 7
FETCH_VERSION = 11


def _connect(bootstrap: str) -> socket.socket:
    host, _, port = bootstrap.rpartition(":")
    sock = socket.create_connection((host, int(port)))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _read_exact(sock: socket.socket, view: memoryview, size: int) -> None:
    got = 0
    while got < size:
        n = sock.recv_into(view[got:size])
        if n == 0:
            raise ConnectionError("broker closed the connection")
        got += n


def _read_frame(sock: socket.socket, buf: bytearray) -> memoryview:
    """One response frame (without its size) into ``buf``, growing it if needed."""
    head = memoryview(buf)
    _read_exact(sock, head, 4)
    (size,) = _I32.unpack_from(buf, 0)
    if size > len(buf):
        buf.extend(bytes(size - len(buf)))
    view = memoryview(buf)
    _read_exact(sock, view, size)
    return view[:size]


def build_batch(record_size: int, batch_bytes: int) -> tuple[bytes, int]:
    """One uncompressed batch of about ``batch_bytes`` of random-letter values, and its record count."""
    per_record = record_size + 8  # value + ~8 bytes of record framing for small records
    count = max(1, (batch_bytes - R.HEADER_SIZE) // per_record)
    letters = os.urandom(count * record_size).translate(bytes(65 + (i % 26) for i in range(256)))
    now = int(time.time() * 1000)
    records = [(None, letters[i * record_size : (i + 1) * record_size], [], now) for i in range(count)]
    return R.build_batch(records), count


def produce(args: argparse.Namespace) -> dict[str, float]:
    batch, per_batch = build_batch(args.record_size, args.batch_bytes)
    requests = []
    for p in range(args.partitions):
        request = ProduceRequestData(
            acks=args.acks,
            timeout_ms=30_000,
            topic_data=[TopicProduceData(args.topic, [PartitionProduceData(p, bytearray(batch))])],
            version=PRODUCE_VERSION,
        )
        frame = encode_request(request, correlation_id=0, client_id="odradek-wireload")
        requests.append(bytearray(_I32.pack(len(frame)) + frame))
    n_requests = -(-args.records // per_batch)
    buf = bytearray(1 << 16)
    sock = _connect(args.bootstrap)
    inflight: deque[int] = deque()
    errors = 0
    start = time.perf_counter()
    with sock:
        for i in range(n_requests):
            req = requests[i % args.partitions]
            _I32.pack_into(req, 8, i)  # correlation id: size(4) api_key(2) api_version(2)
            sock.sendall(req)
            if args.acks == 0:
                continue
            inflight.append(i)
            if len(inflight) >= args.inflight:
                errors += _produce_response(sock, buf, inflight.popleft())
        while inflight:
            errors += _produce_response(sock, buf, inflight.popleft())
    elapsed = time.perf_counter() - start
    count = n_requests * per_batch
    return {
        "records": count,
        "bytes": count * args.record_size,
        "seconds": elapsed,
        "requests": n_requests,
        "records_per_batch": per_batch,
        "errors": errors,
    }


def _produce_response(sock: socket.socket, buf: bytearray, correlation_id: int) -> int:
    frame = _read_frame(sock, buf)
    (got,) = _I32.unpack_from(frame, 0)
    if got != correlation_id:
        raise RuntimeError(f"response {got} out of order (expected {correlation_id})")
    # v7 body: topics(1) name partitions(1) index(4) error(2) ...
    (name_len,) = struct.unpack_from(">h", frame, 8)
    pos = 8 + 2 + name_len + 4 + 4
    (error,) = struct.unpack_from(">h", frame, pos)
    return 1 if error else 0


def _fetch_request(topic: str, offsets: list[int], correlation_id: int, partition_max: int) -> bytes:
    name = topic.encode()
    body = bytearray(struct.pack(">iiiibii", -1, 500, 1, 52_428_800, 0, 0, -1))
    body += struct.pack(">i", 1) + struct.pack(">h", len(name)) + name + struct.pack(">i", len(offsets))
    for p, offset in enumerate(offsets):
        body += struct.pack(">iiqqi", p, -1, offset, -1, partition_max)
    body += struct.pack(">i", 0) + struct.pack(">h", 0)  # forgotten topics: none; rack id: ""
    frame = encode_request_header(1, FETCH_VERSION, correlation_id, "odradek-wireload") + bytes(body)
    return _I32.pack(len(frame)) + frame


def fetch(args: argparse.Namespace) -> dict[str, float]:
    offsets = [0] * args.partitions
    buf = bytearray(64 << 20)
    count = 0
    size = 0
    requests = 0
    sock = _connect(args.bootstrap)
    start = time.perf_counter()
    with sock:
        while count < args.records:
            sock.sendall(_fetch_request(args.topic, offsets, requests, args.partition_max_bytes))
            frame = _read_frame(sock, buf)
            requests += 1
            got, got_bytes = _walk_fetch_response(frame, offsets)
            count += got
            size += got_bytes
            if time.perf_counter() - start > args.timeout:
                raise RuntimeError(f"fetched {count} of {args.records} records in {args.timeout} s")
    elapsed = time.perf_counter() - start
    return {
        "records": count,
        "bytes": count * args.record_size,
        "wire_bytes": size,
        "seconds": elapsed,
        "requests": requests,
    }


def _walk_fetch_response(frame: memoryview, offsets: list[int]) -> tuple[int, int]:
    """Records and record-set bytes in a Fetch v11 response; advances ``offsets`` past whole batches."""
    pos = 4 + 4 + 2 + 4  # correlation id, throttle, error, session id
    (n_topics,) = _I32.unpack_from(frame, pos)
    pos += 4
    count = 0
    size = 0
    for _ in range(n_topics):
        (name_len,) = struct.unpack_from(">h", frame, pos)
        pos += 2 + name_len
        (n_parts,) = _I32.unpack_from(frame, pos)
        pos += 4
        for _ in range(n_parts):
            partition, error = struct.unpack_from(">ih", frame, pos)
            pos += 4 + 2 + 8 + 8 + 8  # index, error, high watermark, last stable, log start
            if error:
                raise RuntimeError(f"fetch error {error} on partition {partition}")
            (n_aborted,) = _I32.unpack_from(frame, pos)
            pos += 4 + max(0, n_aborted) * 16 + 4  # aborted transactions, preferred read replica
            (length,) = _I32.unpack_from(frame, pos)
            pos += 4
            end = pos + max(0, length)
            size += max(0, length)
            at = pos
            while at + 12 <= end:
                base, batch_len = _BATCH_HEAD.unpack_from(frame, at)
                if at + 12 + batch_len > end:
                    break  # trailing partial batch
                (delta,) = _LAST_DELTA.unpack_from(frame, at + 23)
                (records,) = _RECORD_COUNT.unpack_from(frame, at + 57)
                if base >= offsets[partition]:
                    count += records
                offsets[partition] = max(offsets[partition], base + delta + 1)
                at += 12 + batch_len
            pos = end
    return count, size


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("mode", choices=("produce", "fetch"))
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--records", type=int, required=True)
    parser.add_argument("--record-size", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=1, help="partitions 0..N-1, round-robin")
    parser.add_argument("--acks", type=int, default=1, choices=(-1, 0, 1))
    parser.add_argument("--batch-bytes", type=int, default=1_000_000)
    parser.add_argument("--inflight", type=int, default=5)
    parser.add_argument("--partition-max-bytes", type=int, default=10_485_760)
    parser.add_argument("--timeout", type=float, default=600)
    args = parser.parse_args(argv)
    result = produce(args) if args.mode == "produce" else fetch(args)
    print(json.dumps(result))
    return 1 if result.get("errors") else 0


if __name__ == "__main__":
    raise SystemExit(main())
