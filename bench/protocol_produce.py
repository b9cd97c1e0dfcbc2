"""Produce request decode: kio's native reader vs odradek's hand-written one, and response encode.

The broker needs each partition's records as a writable ``bytearray`` (it rewrites baseOffset
and partitionLeaderEpoch in place), so the fair comparison is "frame in, bytearray out": kio
decodes into immutable ``bytes`` and needs a second copy, the hand-written decoder slices the
frame once. Also timed: the same decode without the bytearray (kio's best case), the Produce
response encode (kio's pure-Python writer vs hand-written) and the bounds guard that runs in
front of every kio decode (kio's native reader aborts the process on a forged array count,
so a broker may only use kio behind it: the fair figure for kio is guard + kio + bytearray).

Run: ``.venv/bin/python bench/protocol_produce.py [--repeat N]``; prints one line per case.
"""

from __future__ import annotations

import argparse
import datetime
import io
import timeit
from collections.abc import Callable

from kio.schema.produce.v7.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.schema.produce.v7.response import PartitionProduceResponse, ProduceResponse, TopicProduceResponse
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i16, i32, i64

from odradek.protocol import kio_error
from odradek.protocol import produce as hand_written
from odradek.protocol.guard import check_message

CASES = [(100, 1), (16_000, 1), (1_000_000, 1), (16_000, 8)]


def _request(size: int, partitions: int) -> bytes:
    request = ProduceRequest(
        transactional_id=None,
        acks=i16(1),
        timeout=datetime.timedelta(milliseconds=30000),
        topic_data=(
            TopicProduceData(
                name="topic-a",
                partition_data=tuple(
                    PartitionProduceData(index=i32(p), records=b"x" * size) for p in range(partitions)
                ),
            ),
        ),
    )
    buf = io.BytesIO()
    entity_writer(ProduceRequest)(buf, request)
    return buf.getvalue()


def _time(fn: Callable[[], object], repeat: int) -> float:
    number = max(20, 20000 // repeat)
    best = min(timeit.repeat(fn, number=number, repeat=repeat))
    return best / number * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    reader = entity_reader(ProduceRequest)
    for size, partitions in CASES:
        frame = bytearray(_request(size, partitions))
        readonly = memoryview(frame).toreadonly()

        def kio_only(readonly: memoryview = readonly) -> object:
            return reader(readonly, 0)

        def kio_writable(readonly: memoryview = readonly) -> object:
            value, _ = reader(readonly, 0)
            return [bytearray(p.records) for t in value.topic_data for p in t.partition_data]

        def kio_safe(readonly: memoryview = readonly) -> object:
            check_message(ProduceRequest, readonly, 0)  # what the broker must run before kio
            value, _ = reader(readonly, 0)
            return [bytearray(p.records) for t in value.topic_data for p in t.partition_data]

        def hand(frame: bytearray = frame) -> object:
            return hand_written.decode_produce_request(7, frame, 0)

        k, kw, ks = _time(kio_only, args.repeat), _time(kio_writable, args.repeat), _time(kio_safe, args.repeat)
        h = _time(hand, args.repeat)
        print(
            f"decode {partitions} x {size:>9,} B: kio {k:8.2f} us | kio+bytearray {kw:8.2f} us | "
            f"guard+kio+bytearray {ks:8.2f} us | hand-written (bytearray) {h:8.2f} us"
        )
    # response encode, 8 partitions
    kio_response = ProduceResponse(
        responses=(
            TopicProduceResponse(
                name="topic-a",
                partition_responses=tuple(
                    PartitionProduceResponse(
                        index=i32(p), error_code=kio_error(0), base_offset=i64(1000 * p), log_start_offset=i64(0)
                    )
                    for p in range(8)
                ),
            ),
        ),
        throttle_time=datetime.timedelta(0),
    )
    writer = entity_writer(ProduceResponse)
    mine = hand_written.ProduceResponseData(
        [
            hand_written.TopicProduceResponse(
                "topic-a", [hand_written.PartitionProduceResponse(p, 0, 1000 * p, -1, 0) for p in range(8)]
            )
        ]
    )

    def kio_encode() -> object:
        out = io.BytesIO()
        writer(out, kio_response)
        return out.getvalue()

    def hand_encode() -> object:
        return hand_written.encode_produce_response(7, mine)

    assert kio_encode() == hand_encode()
    print(
        f"encode response, 8 partitions: kio {_time(kio_encode, args.repeat):8.2f} us | "
        f"hand-written {_time(hand_encode, args.repeat):8.2f} us"
    )
    # the bounds guard in front of kio, on a Produce v7 request (what it would cost there)
    small = _request(100, 8)
    guard = _time(lambda: check_message(ProduceRequest, small, 0), args.repeat)
    print(f"bounds guard, Produce 8 partitions: {guard:8.2f} us")


if __name__ == "__main__":
    main()
