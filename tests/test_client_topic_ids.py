"""odradek's consumer on topic ids (KIP-516) and Fetch v16 leader hints (KIP-951), without
sockets: the fetch session handler keyed by topic id (Java's ``FetchSessionHandler``), the
version rule (v13+ only when every topic has an id, else v12, as Java's ``AbstractFetch``), the
cluster view noticing a topic's new id, and the fetcher against a fake network: answers by id,
UNKNOWN_TOPIC_ID / INCONSISTENT_TOPIC_ID / FETCH_SESSION_TOPIC_ID_ERROR, and a leader hint that
moves a partition at once."""

from __future__ import annotations

import types
import uuid
from typing import Any

import trio
from client_fakes import FakeFetchNetwork

from odradek.client.cluster import BrokerInfo, ClusterSnapshot, PartitionInfo, TopicInfo, changed_topic_ids
from odradek.client.config import ClientConfig
from odradek.client.fetch_session_handler import (
    INITIAL_EPOCH,
    FetchSessionHandler,
    PartitionData,
)
from odradek.client.fetcher import Fetcher
from odradek.client.subscription import SubscriptionState
from odradek.errors import ErrorCode
from odradek.interfaces import TopicPartition

OLD, NEW, OTHER = uuid.UUID(int=1), uuid.UUID(int=2), uuid.UUID(int=3)
T0, T1, U0 = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("u", 0)


def data(offset: int, topic_id: uuid.UUID | None) -> PartitionData:
    return PartitionData(offset, -1, 1024, 0, -1, topic_id)


def opened(wanted: dict[TopicPartition, PartitionData]) -> FetchSessionHandler:
    """A handler whose session (id 7) holds ``wanted``."""
    handler = FetchSessionHandler("broker 1")
    handler.build(wanted)
    assert handler.handle_response(ErrorCode.NONE, 7, list(wanted))
    return handler


# -- the session handler ---------------------------------------------------------------------------
def test_a_request_can_name_topics_by_id_only_when_every_partition_has_one() -> None:
    handler = FetchSessionHandler("broker 1")
    full = handler.build({T0: data(0, OLD), U0: data(0, OTHER)})
    assert full.can_use_topic_ids and full.topic_names == {OLD: "t", OTHER: "u"}
    assert full.topic_ids() == {"t": OLD, "u": OTHER}
    assert not handler.build({T0: data(0, OLD), U0: data(0, None)}).can_use_topic_ids


def test_a_forgotten_partition_without_an_id_keeps_the_request_on_names() -> None:
    handler = opened({T0: data(0, OLD), U0: data(0, None)})
    request = handler.build({T0: data(5, OLD)})
    assert request.forgotten == [U0] and not request.can_use_topic_ids
    assert request.forgotten_topics(by_id=False) == [{"topic": "u", "partitions": [0]}]


def test_a_changed_topic_id_replaces_the_partition_in_the_session() -> None:
    handler = opened({T0: data(4, OLD), T1: data(9, OLD), U0: data(0, OTHER)})
    request = handler.build({T0: data(4, NEW), T1: data(9, NEW), U0: data(0, OTHER)})
    assert request.incremental and request.can_use_topic_ids
    assert list(request.to_send) == [T0, T1] and request.replaced == {T0: OLD, T1: OLD}
    assert request.topic_ids() == {"t": NEW}
    # by id, the old one is forgotten under its id while the name is fetched under the new one
    assert request.forgotten_topics(by_id=True) == [{"topic": "t", "topic_id": OLD, "partitions": [0, 1]}]
    # by name (v12), a replaced partition is only sent again
    assert request.forgotten_topics(by_id=False) == []
    assert handler.handle_response(ErrorCode.NONE, 7, [T0])
    assert handler.session[T0].topic_id == NEW
    assert not handler.build({T0: data(4, NEW), T1: data(9, NEW), U0: data(0, OTHER)}).to_send


def test_forgotten_and_replaced_partitions_are_each_forgotten_under_the_id_the_session_knew() -> None:
    handler = opened({T0: data(0, OLD), T1: data(0, OLD), U0: data(0, OTHER)})
    request = handler.build({T0: data(0, NEW)})
    assert request.forgotten == [T1, U0] and request.replaced == {T0: OLD}
    assert sorted(map(str, request.forgotten_topics(by_id=True))) == sorted(
        map(
            str,
            [
                {"topic": "t", "topic_id": OLD, "partitions": [1, 0]},
                {"topic": "u", "topic_id": OTHER, "partitions": [0]},
            ],
        )
    )


def test_an_id_learned_for_a_partition_without_one_is_an_ordinary_change() -> None:
    handler = opened({T0: data(0, None)})
    request = handler.build({T0: data(0, NEW)})
    assert list(request.to_send) == [T0] and request.replaced == {}


def test_an_answer_about_a_topic_id_the_request_did_not_name_is_unusable() -> None:
    handler = opened({T0: data(0, OLD)})
    handler.build({T0: data(3, OLD)})
    assert not handler.handle_response(ErrorCode.NONE, 7, [], unknown_topic_ids=[OTHER])
    assert (handler.session_id, handler.epoch, handler.session) == (7, INITIAL_EPOCH, {})  # closes it


def test_a_session_topic_id_error_closes_the_session_and_opens_another() -> None:
    handler = opened({T0: data(0, None)})
    handler.build({T0: data(0, NEW)})
    assert not handler.handle_response(ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR, 0, [])
    assert (handler.session_id, handler.epoch) == (7, INITIAL_EPOCH)
    assert not handler.build({T0: data(0, NEW)}).incremental


# -- the cluster view ------------------------------------------------------------------------------
def snapshot(ids: dict[str, uuid.UUID | None], leader: int = 1, epoch: int = 0) -> ClusterSnapshot:
    topics = {
        name: TopicInfo(name, ErrorCode.NONE, False, {0: PartitionInfo(name, 0, leader, epoch, (1, 2), (1, 2))}, tid)
        for name, tid in ids.items()
    }
    return ClusterSnapshot({1: BrokerInfo(1, "h1", 9092), 2: BrokerInfo(2, "h2", 9093)}, topics, 1, "c")


def test_a_topic_under_a_new_id_is_noticed_and_a_missing_id_is_not_a_change() -> None:
    known = {"t": OLD, "u": OTHER, "x": OLD}  # x: seen before, missing from the last answer
    after = snapshot({"t": NEW, "u": OTHER, "v": NEW, "w": None, "x": NEW})
    assert changed_topic_ids(known, after) == {"t": (OLD, NEW), "x": (OLD, NEW)}
    assert after.topic_id("t") == NEW and after.topic_id("nope") is None
    assert after.leader_epoch(T0) == 0 and after.leader_epoch(TopicPartition("t", 5)) == -1


# -- the fetcher -----------------------------------------------------------------------------------
def fetcher_on(network: FakeFetchNetwork) -> Fetcher:
    subs = SubscriptionState("earliest")
    subs.assign([T0])
    subs.seek(T0, 10)
    config = ClientConfig("consumer", {"bootstrap.servers": "fake:9092"})
    return Fetcher(network, subs, config, None)  # type: ignore[arg-type]


def fetch_once(fetcher: Fetcher) -> None:
    by_node, _ = fetcher._fetchable_by_node()
    node, parts = next(iter(by_node.items()))
    trio.run(fetcher._fetch, node, parts)


def answer(
    code: ErrorCode, *, session_id: int = 0, topic_id: Any = None, top: ErrorCode = ErrorCode.NONE, **more: Any
) -> Any:
    """A Fetch v13+ answer for partition 0 of the request's first topic (or ``topic_id``)."""

    def respond(request: Any) -> Any:
        partition = types.SimpleNamespace(
            partition_index=0,
            error_code=int(code),
            high_watermark=10,
            last_stable_offset=10,
            log_start_offset=0,
            diverging_epoch=types.SimpleNamespace(epoch=-1, end_offset=-1),
            aborted_transactions=None,
            records=None,
            current_leader=more.get("current_leader", types.SimpleNamespace(leader_id=-1, leader_epoch=-1)),
        )
        asked = request.topics[0].topic_id if request.topics else OLD  # an incremental fetch may name none
        tid = topic_id if topic_id is not None else asked
        topic = types.SimpleNamespace(topic_id=tid, partitions=[partition])
        return types.SimpleNamespace(
            error_code=int(top), session_id=session_id, responses=[topic], node_endpoints=more.get("nodes", ())
        )

    return respond


def test_with_every_topic_id_known_the_consumer_fetches_at_v16_by_id_else_at_v12_by_name() -> None:
    network = FakeFetchNetwork([answer(ErrorCode.NONE), {}], cluster=snapshot({"t": OLD}, epoch=4))
    fetcher = fetcher_on(network)
    fetch_once(fetcher)
    request = network.requests[0]
    assert request.__class__.__module__.startswith("kio.schema.fetch.v16")
    assert request.topics[0].topic_id == OLD and request.topics[0].partitions[0].current_leader_epoch == 4
    network.cluster = snapshot({"t": None})
    fetch_once(fetcher)
    request = network.requests[1]
    assert request.__class__.__module__.startswith("kio.schema.fetch.v12") and request.topics[0].topic == "t"


def test_a_broker_without_v13_is_fetched_by_name() -> None:
    network = FakeFetchNetwork([{}], cluster=snapshot({"t": OLD}), max_version=11)
    fetch_once(fetcher := fetcher_on(network))
    assert network.requests[0].__class__.__module__.startswith("kio.schema.fetch.v11")
    assert not fetcher._errors


def test_unknown_and_inconsistent_topic_ids_ask_for_metadata() -> None:
    for code in (ErrorCode.UNKNOWN_TOPIC_ID, ErrorCode.INCONSISTENT_TOPIC_ID):
        network = FakeFetchNetwork([answer(code)], cluster=snapshot({"t": OLD}))
        fetcher = fetcher_on(network)
        fetch_once(fetcher)
        assert network.updates_requested == 1 and not fetcher._errors
        assert fetcher.subs.state(T0).position == 10


def test_a_session_topic_id_error_asks_for_metadata_and_the_next_fetch_is_a_full_one() -> None:
    network = FakeFetchNetwork(
        [answer(ErrorCode.NONE, session_id=7), answer(ErrorCode.NONE, top=ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR), {}],
        cluster=snapshot({"t": OLD}),
    )
    fetcher = fetcher_on(network)
    fetch_once(fetcher)
    fetch_once(fetcher)
    assert network.updates_requested == 1 and network.requests[1].session_epoch == 1
    network.cluster = snapshot({"t": None})
    fetch_once(fetcher)
    # the session with broker 1 is closed there and a new one opened, now by name
    last = network.requests[2]
    assert (last.session_id, last.session_epoch) == (7, 0) and last.topics[0].topic == "t"


def test_an_answer_about_an_unknown_topic_id_is_dropped() -> None:
    network = FakeFetchNetwork([answer(ErrorCode.NONE, session_id=7, topic_id=OTHER)], cluster=snapshot({"t": OLD}))
    fetcher = fetcher_on(network)
    fetch_once(fetcher)
    handler = fetcher._sessions[1]
    assert handler.epoch == INITIAL_EPOCH and not fetcher._errors


def test_a_topic_recreated_under_the_same_name_is_replaced_in_the_session() -> None:
    network = FakeFetchNetwork(
        [answer(ErrorCode.NONE, session_id=7), answer(ErrorCode.NONE, session_id=7)], cluster=snapshot({"t": OLD})
    )
    fetcher = fetcher_on(network)
    fetch_once(fetcher)
    network.cluster = snapshot({"t": NEW})
    fetch_once(fetcher)
    second = network.requests[1]
    assert second.session_epoch == 1
    assert [(t.topic_id, list(t.partitions)) for t in second.forgotten_topics_data] == [(OLD, [0])]
    assert [t.topic_id for t in second.topics] == [NEW]


def test_a_fetch_v16_leader_hint_moves_the_partition_at_once() -> None:
    hint = types.SimpleNamespace(leader_id=3, leader_epoch=5)
    nodes = [types.SimpleNamespace(node_id=3, host="h3", port=9094, rack=None)]
    network = FakeFetchNetwork(
        [answer(ErrorCode.NOT_LEADER_OR_FOLLOWER, current_leader=hint, nodes=nodes)],
        cluster=snapshot({"t": OLD}, epoch=4),
    )
    fetcher = fetcher_on(network)
    fetch_once(fetcher)
    assert network.cluster.leader_for(T0) == 3 and network.cluster.brokers[3].port == 9094
    assert fetcher._fetchable_by_node()[0] == {3: {T0: (10, -1)}}


def test_a_hint_no_newer_than_the_known_epoch_or_without_a_leader_moves_nothing() -> None:
    for code, leader_id, epoch in (
        (ErrorCode.FENCED_LEADER_EPOCH, 2, 4),  # not newer than epoch 4
        (ErrorCode.NOT_LEADER_OR_FOLLOWER, -1, 9),  # no leader named
        (ErrorCode.NOT_LEADER_OR_FOLLOWER, 2, -1),
        (ErrorCode.UNKNOWN_LEADER_EPOCH, 2, 9),  # not an error that carries a hint
    ):
        hint = types.SimpleNamespace(leader_id=leader_id, leader_epoch=epoch)
        network = FakeFetchNetwork([answer(code, current_leader=hint)], cluster=snapshot({"t": OLD}, epoch=4))
        fetch_once(fetcher_on(network))
        assert network.cluster.leader_for(T0) == 1, code
        assert network.updates_requested >= 1  # a Metadata refresh all the same


def test_a_fenced_leader_epoch_hint_moves_the_partition_too() -> None:
    hint = types.SimpleNamespace(leader_id=2, leader_epoch=6)
    network = FakeFetchNetwork(
        [answer(ErrorCode.FENCED_LEADER_EPOCH, current_leader=hint)], cluster=snapshot({"t": OLD}, epoch=4)
    )
    fetch_once(fetcher_on(network))
    assert network.cluster.leader_for(T0) == 2 and network.cluster.leader_epoch(T0) == 6
