"""The consumer's side of KIP-320 through Fetch, without sockets: the fetcher sends the epoch of
the last record it fetched or consumed as ``last_fetched_epoch`` (Fetch v12), and on a
``diverging_epoch`` answer does what the Java consumer's ``maybeCompleteValidation`` does --
moves back to the first diverging offset, or raises ``LogTruncationError`` with
``auto.offset.reset=none`` -- against a fake broker connection that records the requests."""

from __future__ import annotations

import types
from typing import Any

import pytest
import trio
from client_fakes import FakeFetchNetwork

from odradek.client.config import ClientConfig
from odradek.client.fetcher import Fetcher, LogTruncationError
from odradek.client.subscription import SubscriptionState
from odradek.interfaces import TopicPartition
from odradek.records import build_batch

TP = TopicPartition("t", 0)


def _fetcher(answers: list[dict[str, Any]], reset: str) -> tuple[Fetcher, FakeFetchNetwork]:
    network = FakeFetchNetwork(answers)
    subs = SubscriptionState(reset)
    subs.assign([TP])
    config = ClientConfig("consumer", {"bootstrap.servers": "fake:9092", "auto.offset.reset": reset})
    fetcher = Fetcher(network, subs, config, None)  # type: ignore[arg-type]
    return fetcher, network


def _sent(request: Any) -> tuple[int, int]:
    p = request.topics[0].partitions[0]
    return int(p.fetch_offset), int(p.last_fetched_epoch)


def _fetch_once(fetcher: Fetcher) -> None:
    by_node, _ = fetcher._fetchable_by_node()
    trio.run(fetcher._fetch, 1, by_node[1])


def test_the_epoch_of_the_last_record_is_sent_and_a_divergence_moves_the_position_back() -> None:
    batches = build_batch([(None, b"a", (), 1), (None, b"b", (), 1)], base_offset=0, partition_leader_epoch=3)
    batches += build_batch([(None, b"c", (), 1), (None, b"d", (), 1)], base_offset=2, partition_leader_epoch=5)
    answers = [{"records": batches}, {"diverging_epoch": types.SimpleNamespace(epoch=3, end_offset=2)}]
    fetcher, network = _fetcher(answers, "earliest")
    fetcher.subs.seek(TP, 0)
    _fetch_once(fetcher)
    assert _sent(network.requests[0]) == (0, -1)  # after a seek the epoch is unknown
    records = fetcher.drain(10)[TP]
    st = fetcher.subs.state(TP)
    assert [r.offset for r in records] == [0, 1, 2, 3] and (st.position, st.offset_epoch) == (4, 5)
    _fetch_once(fetcher)  # the new leader's epoch 3 ended at 2: offsets 2-3 were truncated
    assert _sent(network.requests[1]) == (4, 5)
    assert (st.position, st.offset_epoch) == (2, 3)
    assert not fetcher._errors


def test_a_divergence_past_the_position_keeps_it_and_drops_only_the_prefetched_data() -> None:
    batch = build_batch([(None, b"a", (), 1), (None, b"b", (), 1)], base_offset=0, partition_leader_epoch=3)
    answers = [{"records": batch}, {"diverging_epoch": types.SimpleNamespace(epoch=3, end_offset=1)}]
    fetcher, network = _fetcher(answers, "earliest")
    fetcher.subs.seek(TP, 0)
    _fetch_once(fetcher)
    _fetch_once(fetcher)  # prefetch from the end of the buffered batch, with its epoch
    assert _sent(network.requests[1]) == (2, 3)
    st = fetcher.subs.state(TP)
    assert (st.position, fetcher.has_buffered()) == (0, False)
    assert fetcher._fetch_position(TP) == (0, -1)


def test_with_no_reset_policy_a_truncation_is_a_log_truncation_error() -> None:
    batch = build_batch([(None, b"a", (), 1), (None, b"b", (), 1)], base_offset=7, partition_leader_epoch=4)
    answers = [{"records": batch}, {"diverging_epoch": types.SimpleNamespace(epoch=2, end_offset=5)}]
    fetcher, _ = _fetcher(answers, "none")
    fetcher.subs.seek(TP, 7)
    _fetch_once(fetcher)
    fetcher.drain(10)
    _fetch_once(fetcher)
    for _ in range(2):  # every poll() raises until the user seeks
        with pytest.raises(LogTruncationError) as info:
            fetcher.raise_truncations()
        assert info.value.divergent_offsets == {TP: (5, 2)}
    assert fetcher.subs.state(TP).position == 9  # the user decides where to go
    assert fetcher._fetchable_by_node()[0] == {}  # nothing fetched meanwhile
    fetcher.subs.seek(TP, 5)
    fetcher.raise_truncations()
    assert fetcher._fetch_position(TP) == (5, -1)


def test_a_committed_offset_carries_its_epoch_into_the_first_fetch() -> None:
    fetcher, network = _fetcher([{}], "earliest")
    st = fetcher.subs.state(TP)
    st.position, st.offset_epoch = 12, 6
    _fetch_once(fetcher)
    assert _sent(network.requests[0]) == (12, 6)
