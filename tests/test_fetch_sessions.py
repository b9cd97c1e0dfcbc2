"""Incremental fetch sessions (KIP-227): the session cache and fetch contexts on their own, then a
broker that kafka-python (which opens sessions) consumes from, watched through its metrics."""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from client_helpers import fetch_v11_frame, read_response
from kafka import KafkaConsumer, KafkaProducer
from kafka.structs import TopicPartition as KafkaTopicPartition

from odradek.broker.api import FetchPartition, FetchPartitionResult
from odradek.broker.fetch_session import (
    EVICTION_MS,
    FINAL_EPOCH,
    INITIAL_EPOCH,
    INVALID_SESSION_ID,
    FetchSessionCache,
    next_epoch,
)
from odradek.errors import ErrorCode
from odradek.interfaces import TopicPartition
from odradek.protocol import decode_response
from odradek.testing.broker import sample, start_broker, unique_topic

A, B, C = (TopicPartition("t", i) for i in range(3))


def req(tp: TopicPartition, offset: int = 0) -> FetchPartition:
    return FetchPartition(tp, offset, 1 << 20)


def ok(hw: int = 0, *, lso: int | None = None, start: int = 0) -> FetchPartitionResult:
    return FetchPartitionResult(ErrorCode.NONE, hw, hw if lso is None else lso, start)


class Clock:
    def __init__(self) -> None:
        self.ms = 0.0

    def __call__(self) -> float:
        return self.ms


def opened(cache: FetchSessionCache, *tps: TopicPartition, follower: bool = False) -> int:
    """A session opened by a full fetch (epoch 0) of ``tps``; returns its id."""
    context = cache.new_context(INVALID_SESSION_ID, INITIAL_EPOCH, [req(tp) for tp in tps], [], follower=follower)
    order, session_id, error = cache.respond(context, {tp: ok() for tp in tps})
    assert error == ErrorCode.NONE and order == list(tps)
    return session_id


def test_epochs_count_up_and_wrap_past_zero() -> None:
    assert next_epoch(INITIAL_EPOCH) == 1
    assert next_epoch(41) == 42
    assert next_epoch(2**31 - 1) == 1
    assert next_epoch(FINAL_EPOCH) == FINAL_EPOCH


def test_a_final_epoch_fetches_without_a_session() -> None:
    """What librdkafka sends (session 0, epoch -1): a full fetch, answered with session id 0."""
    cache = FetchSessionCache(10)
    context = cache.new_context(0, FINAL_EPOCH, [req(A), req(B)], [], follower=False)
    assert [p.tp for p in context.partitions] == [A, B]
    assert cache.respond(context, {A: ok(), B: ok()}) == ([A, B], INVALID_SESSION_ID, ErrorCode.NONE)
    assert not cache.sessions


def test_an_initial_epoch_opens_a_session_at_epoch_one() -> None:
    cache = FetchSessionCache(10)
    session_id = opened(cache, A, B)
    assert session_id != INVALID_SESSION_ID
    session = cache.sessions[session_id]
    assert session.epoch == 1 and list(session.partitions) == [A, B]
    assert cache.cached_partitions == 2


def test_response_partitions_says_what_respond_would_answer_and_changes_nothing() -> None:
    """What a consumer's Fetch is charged against its byte rate before the broker decides to
    send it (Kafka's getResponseSize): the changed partitions, the session left as it was."""
    cache = FetchSessionCache(10)
    sid = opened(cache, A, B, C)
    context = cache.new_context(sid, 1, [], [], follower=False)
    results = {A: ok(), B: ok(5), C: ok(start=3)}
    assert cache.response_partitions(context, results) == [B, C]
    assert cache.response_partitions(context, results) == [B, C]  # nothing remembered
    assert cache.respond(context, results) == ([B, C], sid, ErrorCode.NONE)
    context = cache.new_context(sid, 2, [], [], follower=False)
    assert cache.response_partitions(context, results) == []  # now told
    full = cache.new_context(INVALID_SESSION_ID, FINAL_EPOCH, [req(A), req(B)], [], follower=False)
    assert cache.response_partitions(full, {A: ok(), B: ok()}) == [A, B]


def test_an_incremental_fetch_answers_only_what_changed_and_moves_it_last() -> None:
    cache = FetchSessionCache(10)
    sid = opened(cache, A, B, C)
    # nothing named: every partition of the session is fetched, none changed
    context = cache.new_context(sid, 1, [], [], follower=False)
    assert [p.tp for p in context.partitions] == [A, B, C]
    assert cache.respond(context, {A: ok(), B: ok(), C: ok()}) == ([], sid, ErrorCode.NONE)
    # B's high watermark moved, C's log start offset did
    context = cache.new_context(sid, 2, [], [], follower=False)
    order, _, _ = cache.respond(context, {A: ok(), B: ok(5), C: ok(start=3)})
    assert order == [B, C]
    assert list(cache.sessions[sid].partitions) == [A, B, C]
    # only A changes now (its LSO: a transaction ended), and it goes to the end of the order
    context = cache.new_context(sid, 3, [], [], follower=False)
    order, _, _ = cache.respond(context, {A: ok(0, lso=0), B: ok(5), C: ok(start=3)})
    assert order == []
    context = cache.new_context(sid, 4, [], [], follower=False)
    order, _, _ = cache.respond(context, {A: ok(7, lso=2), B: ok(5), C: ok(start=3)})
    assert order == [A]
    assert list(cache.sessions[sid].partitions) == [B, C, A]


def test_the_request_updates_positions_and_adds_and_forgets_partitions() -> None:
    cache = FetchSessionCache(10)
    sid = opened(cache, A, B)
    context = cache.new_context(sid, 1, [req(A, 40), req(C, 7)], [B], follower=False)
    assert {p.tp: p.fetch_offset for p in context.partitions} == {A: 40, C: 7}
    # a partition new to the session is answered: nothing was told about it yet
    order, _, _ = cache.respond(context, {A: ok(), C: ok()})
    assert order == [C]


def test_errors_are_always_answered_and_the_recovery_too() -> None:
    cache = FetchSessionCache(10)
    sid = opened(cache, A)
    failed = FetchPartitionResult(ErrorCode.NOT_LEADER_OR_FOLLOWER)
    for epoch in (1, 2):
        context = cache.new_context(sid, epoch, [], [], follower=False)
        assert cache.respond(context, {A: failed})[0] == [A]
    context = cache.new_context(sid, 3, [], [], follower=False)
    assert cache.respond(context, {A: ok()})[0] == [A]  # back to normal: the client learns the HW again
    context = cache.new_context(sid, 4, [], [], follower=False)
    assert cache.respond(context, {A: ok()})[0] == []


def test_session_errors() -> None:
    cache = FetchSessionCache(10)
    assert cache.new_context(12345, 1, [], [], follower=False).error == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    assert cache.new_context(0, 3, [], [], follower=False).error == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    sid = opened(cache, A)
    assert cache.new_context(sid, 5, [], [], follower=False).error == ErrorCode.INVALID_FETCH_SESSION_EPOCH
    # the wrong epoch changed nothing: the right one still works
    assert cache.new_context(sid, 1, [], [], follower=False).error == ErrorCode.NONE


def test_two_requests_in_flight_on_one_session_fail_the_older() -> None:
    cache = FetchSessionCache(10)
    sid = opened(cache, A)
    first = cache.new_context(sid, 1, [], [], follower=False)  # a long poll, still waiting...
    second = cache.new_context(sid, 2, [], [], follower=False)
    assert cache.respond(second, {A: ok(1)}) == ([A], sid, ErrorCode.NONE)
    assert cache.respond(first, {A: ok(1)}) == ([], sid, ErrorCode.INVALID_FETCH_SESSION_EPOCH)


def test_a_full_fetch_naming_a_session_closes_it_and_an_emptied_session_closes() -> None:
    cache = FetchSessionCache(10)
    sid = opened(cache, A)
    context = cache.new_context(sid, FINAL_EPOCH, [req(A)], [], follower=False)
    assert sid not in cache.sessions and context.session is None and not context.create
    sid = opened(cache, A, B)
    context = cache.new_context(sid, 1, [], [A, B], follower=False)
    assert sid not in cache.sessions and context.session is None
    assert cache.respond(context, {}) == ([], INVALID_SESSION_ID, ErrorCode.NONE)


def test_no_slots_no_sessions() -> None:
    cache = FetchSessionCache(0)
    assert opened(cache, A) == INVALID_SESSION_ID
    assert not cache.sessions


def test_a_full_cache_evicts_a_stale_session_or_a_less_valuable_old_one() -> None:
    clock = Clock()
    cache = FetchSessionCache(1, clock_ms=clock)
    first = opened(cache, A, B)
    clock.ms += 1000
    # young, and the new one is no bigger: no room
    assert opened(cache, C) == INVALID_SESSION_ID
    # a follower's session outranks a consumer's, young or not
    follower = opened(cache, C, follower=True)
    assert follower != INVALID_SESSION_ID and first not in cache.sessions and cache.evictions == 1
    # a consumer cannot evict a follower's young session, however big
    assert opened(cache, A, B, C) == INVALID_SESSION_ID
    # once that session is older than EVICTION_MS and still in use, a bigger consumer session
    # still does not outrank a follower's...
    clock.ms += EVICTION_MS + 1
    cache.new_context(follower, 1, [], [], follower=True)  # used: not stale
    assert opened(cache, A, B, C) == INVALID_SESSION_ID
    # ...but when nobody uses it for EVICTION_MS it is stale, and anyone may take its slot
    clock.ms += EVICTION_MS + 1
    consumer = opened(cache, A)
    assert consumer != INVALID_SESSION_ID and follower not in cache.sessions and cache.evictions == 2


def test_a_bigger_consumer_session_evicts_an_old_smaller_one() -> None:
    clock = Clock()
    cache = FetchSessionCache(1, clock_ms=clock)
    small = opened(cache, A)
    clock.ms += EVICTION_MS + 1
    cache.new_context(small, 1, [], [], follower=False)  # in use, so not stale; but old
    assert opened(cache, A) == INVALID_SESSION_ID  # not bigger
    big = opened(cache, A, B)
    assert big != INVALID_SESSION_ID and small not in cache.sessions


# -- a broker and kafka-python, which opens fetch sessions ----------------------------------------


def _fetch(sock: socket.socket, cid: int, partitions: list[tuple[str, int, int]], **kw: Any) -> Any:
    sock.sendall(fetch_v11_frame(cid, partitions, **kw))
    got_cid, response = decode_response(1, 11, read_response(sock))
    assert got_cid == cid
    return response


def _answered(response: Any) -> dict[tuple[str, int], int]:
    """The partitions a Fetch response carries, with their high watermarks."""
    return {(t.topic, p.partition_index): p.high_watermark for t in response.responses for p in t.partitions}


@pytest.mark.integration
def test_a_session_over_the_wire(tmp_path: Path) -> None:
    """Fetch v11 by hand against a broker process: open a session, fetch incrementally (only
    what changed comes back), then the session errors."""
    topic = unique_topic("wire")
    with start_broker(tmp_path, {"num.partitions": 2}) as broker:
        for partition, value in ((0, b"a"), (0, b"b")):
            subprocess.run(
                ["kcat", "-b", broker.bootstrap, "-P", "-t", topic, "-p", str(partition)],
                input=value,
                check=True,
                timeout=60,
            )
        with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as sock:
            full = _fetch(sock, 1, [(topic, 0, 0), (topic, 1, 0)], session_epoch=INITIAL_EPOCH)
            session = full.session_id
            assert int(full.error_code) == 0 and session != INVALID_SESSION_ID
            assert _answered(full) == {(topic, 0): 2, (topic, 1): 0}
            # the consumer moved on in partition 0: nothing new anywhere, nothing answered
            nothing = _fetch(sock, 2, [(topic, 0, 2)], session_id=session, session_epoch=1)
            assert (int(nothing.error_code), nothing.session_id, _answered(nothing)) == (0, session, {})
            # a record in partition 1, which this request does not name: the session fetches it
            subprocess.run(
                ["kcat", "-b", broker.bootstrap, "-P", "-t", topic, "-p", "1"], input=b"c", check=True, timeout=60
            )
            news = _fetch(sock, 3, [], session_id=session, session_epoch=2)
            assert _answered(news) == {(topic, 1): 1}
            # the same epoch again (a duplicate request), an unknown session
            stale = _fetch(sock, 4, [], session_id=session, session_epoch=2)
            assert int(stale.error_code) == ErrorCode.INVALID_FETCH_SESSION_EPOCH and _answered(stale) == {}
            unknown = _fetch(sock, 5, [], session_id=session + 1, session_epoch=1)
            assert int(unknown.error_code) == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
            # forgetting partition 1 leaves partition 0; a full fetch naming the session closes it
            left = _fetch(sock, 6, [], session_id=session, session_epoch=3, forgotten=[(topic, 1)])
            assert int(left.error_code) == 0 and _answered(left) == {}
            closed = _fetch(sock, 7, [(topic, 0, 0)], session_id=session, session_epoch=FINAL_EPOCH)
            assert (closed.session_id, _answered(closed)) == (INVALID_SESSION_ID, {(topic, 0): 2})
            gone = _fetch(sock, 8, [], session_id=session, session_epoch=4)
            assert int(gone.error_code) == ErrorCode.FETCH_SESSION_ID_NOT_FOUND


def take(consumer: KafkaConsumer, n: int) -> list[str]:
    """The next ``n`` values ``consumer`` reads (fewer if it times out)."""
    got: list[str] = []
    for message in consumer:
        got.append(message.value.decode())
        if len(got) == n:
            break
    return got


@pytest.mark.integration
def test_kafka_python_consumes_through_an_incremental_fetch_session(tmp_path: Path) -> None:
    topic = unique_topic("sessions")
    with start_broker(tmp_path, {"metrics.prometheus.listener": "127.0.0.1:0", "num.partitions": 4}) as broker:
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
        for i in range(40):
            producer.send(topic, f"first-{i}".encode(), partition=i % 4)
        producer.flush()
        consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, consumer_timeout_ms=15000, fetch_max_wait_ms=100)
        consumer.assign([KafkaTopicPartition(topic, p) for p in range(4)])
        consumer.seek_to_beginning()
        assert sorted(take(consumer, 40)) == sorted(f"first-{i}" for i in range(40))
        deadline = time.monotonic() + 10
        while sample(broker.metrics(), "kafka_server_fetchsessioncache_numincrementalfetchsessions") < 1:
            assert time.monotonic() < deadline, "kafka-python opened no fetch session"
            time.sleep(0.1)
        assert sample(broker.metrics(), "kafka_server_fetchsessioncache_numincrementalfetchpartitionscached") == 4
        # records produced now reach the consumer through incremental fetches of that session
        for i in range(20):
            producer.send(topic, f"second-{i}".encode(), partition=i % 4)
        producer.flush()
        assert sorted(take(consumer, 20)) == sorted(f"second-{i}" for i in range(20))
        # one session served all of it: a session error would have sent kafka-python back to a
        # full fetch, which opens another session (the old one stays until evicted)
        samples = broker.metrics()
        assert sample(samples, "kafka_server_fetchsessioncache_numincrementalfetchsessions") == 1
        fetches = sum(
            v
            for (name, labels), v in samples.items()
            if name == "kafka_network_requestmetrics_requests_total" and dict(labels)["request"] == "Fetch"
        )
        assert fetches >= 2  # the full one that opened the session, then incremental ones
        consumer.close()
        producer.close()
        assert not broker.log_problems(), broker.log_problems()


def _fetch_requests(samples: Any) -> float:
    return sum(
        v
        for (name, labels), v in samples.items()
        if name == "kafka_network_requestmetrics_requests_total" and dict(labels)["request"] == "Fetch"
    )


@pytest.mark.integration
def test_odradeks_consumer_fetches_through_one_incremental_fetch_session(tmp_path: Path) -> None:
    """odradek's own consumer opens a session with the broker (as the Java consumer does) and
    keeps it: new records on some partitions come through incremental fetches of that session,
    and a seek (a new position) is sent to it as a change, not as a new session."""
    from odradek.client import Consumer, Producer
    from odradek.client import TopicPartition as ClientTopicPartition

    topic = unique_topic("own-sessions")
    with start_broker(tmp_path, {"metrics.prometheus.listener": "127.0.0.1:0", "num.partitions": 4}) as broker:
        with Producer({"bootstrap.servers": broker.bootstrap}) as producer:
            for i in range(40):
                producer.send(topic, f"first-{i}".encode(), partition=i % 4)
            producer.flush()
        conf = {"bootstrap.servers": broker.bootstrap, "auto.offset.reset": "earliest", "fetch.max.wait.ms": 100}
        with Consumer(conf) as consumer:
            consumer.assign([ClientTopicPartition(topic, p) for p in range(4)])

            def take(n: int) -> list[str]:
                got: list[str] = []
                deadline = time.monotonic() + 15
                while len(got) < n and time.monotonic() < deadline:
                    for records in consumer.poll(0.5).values():
                        got.extend(r.value.decode() for r in records)
                return got

            assert sorted(take(40)) == sorted(f"first-{i}" for i in range(40))
            samples = broker.metrics()
            assert sample(samples, "kafka_server_fetchsessioncache_numincrementalfetchsessions") == 1
            assert sample(samples, "kafka_server_fetchsessioncache_numincrementalfetchpartitionscached") == 4
            with Producer({"bootstrap.servers": broker.bootstrap}) as producer:
                for i in range(10):
                    producer.send(topic, f"second-{i}".encode(), partition=i % 2)
                producer.flush()
            assert sorted(take(10)) == sorted(f"second-{i}" for i in range(10))
            consumer.seek(ClientTopicPartition(topic, 3), 0)
            assert sorted(take(10)) == sorted(f"first-{i}" for i in range(3, 40, 4))
            samples = broker.metrics()
            # still the one session: a session error would have opened another one
            assert sample(samples, "kafka_server_fetchsessioncache_numincrementalfetchsessions") == 1
            assert _fetch_requests(samples) >= 3
        assert not broker.log_problems(), broker.log_problems()
