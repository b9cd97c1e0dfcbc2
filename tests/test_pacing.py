"""Big requests leave the event loop to other clients: kio's decode and encode of a large frame
run in a worker thread, and long per-entry loops checkpoint (odradek.pacing). Checked by where
the work runs and by whether other tasks get scheduled -- no timings."""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

import pytest
import trio

from odradek.config import default_config
from odradek.interfaces import Endpoint
from odradek.pacing import paced
from odradek.plugins.transport_tcp import apis
from odradek.plugins.transport_tcp.apis import OFFLOAD_FRAME_BYTES, Dispatcher
from odradek.protocol import ApiKey, decode_response, encode_request, request_type
from odradek.protocol.headers import parse_request_header

pytestmark = pytest.mark.trio


async def test_paced_lets_other_tasks_run_during_a_long_loop() -> None:
    ticks: list[int] = []
    seen = 0

    async def other() -> None:
        while True:
            ticks.append(seen)
            await trio.lowlevel.checkpoint()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(other)
        await trio.lowlevel.checkpoint()  # let it start
        before = len(ticks)
        async for _ in paced(range(10 * 1024)):
            seen += 1  # no await of its own: only paced() can let `other` run
        assert seen == 10 * 1024
        assert len(ticks) - before >= 9  # it ran between the chunks, not only after the loop
        assert 0 < ticks[before + 1] < seen
        nursery.cancel_scope.cancel()


def _frame(n_ids: int) -> tuple[Any, bytearray]:
    cls = request_type(ApiKey.DESCRIBE_TRANSACTIONS, 0)
    request = cls(transactional_ids=tuple(f"txn-{i:06d}" for i in range(n_ids)))
    wire = encode_request(request, correlation_id=7, client_id="c")
    frame = bytearray(wire)  # a frame without its size prefix, as the connection hands it over
    return parse_request_header(frame), frame


@pytest.mark.parametrize(("n_ids", "offloaded"), [(10, False), (20_000, True)])
async def test_a_big_frame_is_decoded_and_encoded_off_the_event_loop(
    monkeypatch: pytest.MonkeyPatch, n_ids: int, offloaded: bool
) -> None:
    """DescribeTransactions naming 20k ids (> OFFLOAD_FRAME_BYTES): kio's decode and encode run in
    a worker thread; a small one stays on the loop (a thread hop would only add latency)."""
    threads: dict[str, int] = {}
    decode, encode = apis.decode_request, apis._encode

    def recording_decode(*args: Any) -> Any:
        threads["decode"] = threading.get_ident()
        return decode(*args)

    def recording_encode(*args: Any) -> Any:
        threads["encode"] = threading.get_ident()
        return encode(*args)

    monkeypatch.setattr(apis, "decode_request", recording_decode)
    monkeypatch.setattr(apis, "_encode", recording_encode)
    header, frame = _frame(n_ids)
    assert (len(frame) >= OFFLOAD_FRAME_BYTES) is offloaded
    broker = SimpleNamespace(transaction_coordinator=None)
    dispatcher = Dispatcher(broker, default_config(), Endpoint("PLAINTEXT", "127.0.0.1", 0))
    wire = await dispatcher.process(header, frame, "peer")
    assert isinstance(wire, bytes)
    loop = threading.get_ident()
    assert (threads["decode"] != loop, threads["encode"] != loop) == (offloaded, offloaded)
    _, response = decode_response(ApiKey.DESCRIBE_TRANSACTIONS, 0, wire)
    assert len(response.transaction_states) == n_ids
    assert response.transaction_states[-1].transactional_id == f"txn-{n_ids - 1:06d}"
