"""Client quotas, in-process: KIP-55 precedence, entity paths, Kafka's rate windows and throttle
times under trio's autojump clock, the watched quota cache over meta_local, ZooKeeper and etcd,
KIP-546 validation and filters, and the connection's mute."""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from odradek.broker.ip_quota_configs import IpConnectionRates
from odradek.broker.quota_admin import (
    MATCH_DEFAULT,
    MATCH_EXACT,
    MATCH_SPECIFIED,
    QuotaAlteration,
    QuotaOp,
    QuotaRequestError,
    alter_client_quotas,
    describe_client_quotas,
    to_entity,
)
from odradek.broker.quota_configs import (
    CONSUMER_BYTE_RATE,
    DEFAULT,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    ClientQuotaConfigs,
    MetricTags,
    QuotaEntity,
    parse_entity_key,
    precedence,
    quota_values,
)
from odradek.broker.quotas import ClientQuotaManager, QuotaManagers, Rate, throttle_time_ms
from odradek.entity_configs import EntityConfigs
from odradek.interfaces import MetadataStore
from odradek.plugins.meta_local.store import FILE_NAME, LocalMetadataStore
from odradek.protocol import (
    FETCH_ENVELOPE_VERSIONS,
    ApiKey,
    FetchPartitionData,
    FetchResponseData,
    FetchTopicData,
    PartitionProduceData,
    ProduceRequestData,
    TopicProduceData,
    build_fetch_envelope,
    decode_response,
    encode_request,
    fetch_response_size,
    request_type,
)


def _clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0)


def _configs(entities: dict[QuotaEntity, dict[str, float]]) -> ClientQuotaConfigs:
    configs = ClientQuotaConfigs(store=None)  # type: ignore[arg-type]  # resolve never reads it
    for entity, values in entities.items():
        configs.set_entity(entity, values)
    return configs


# -- entities and precedence ---------------------------------------------------------------------


def test_entity_keys_follow_kafkas_layout_and_round_trip() -> None:
    cases = {
        QuotaEntity("alice", None): "/config/users/alice",
        QuotaEntity("alice", "app"): "/config/users/alice/clients/app",
        QuotaEntity(DEFAULT, None): "/config/users/<default>",
        QuotaEntity(DEFAULT, DEFAULT): "/config/users/<default>/clients/<default>",
        QuotaEntity("alice", DEFAULT): "/config/users/alice/clients/<default>",
        QuotaEntity(None, "app"): "/config/clients/app",
        QuotaEntity(None, DEFAULT): "/config/clients/<default>",
        QuotaEntity("CN=a/b", "x y"): "/config/users/CN%3Da%2Fb/clients/x%20y",
    }
    for entity, key in cases.items():
        assert entity.key() == key
        assert parse_entity_key(key) == entity
    # a user named "<default>" is not the default entity
    named = QuotaEntity("<default>", None)
    assert named.key() == "/config/users/%3Cdefault%3E"
    assert parse_entity_key(named.key()) == named != QuotaEntity(DEFAULT, None)
    assert parse_entity_key("/config/topics/t") is None
    assert parse_entity_key("/config/users/a/clients") is None


def test_quota_values_keep_only_quota_keys() -> None:
    doc = {
        "version": 1,
        "config": {"SCRAM-SHA-256": "salt=...", "producer_byte_rate": "1024", "request_percentage": "x"},
    }
    assert quota_values(json.dumps(doc).encode()) == {PRODUCER_BYTE_RATE: 1024.0}


LEVELS = [
    (QuotaEntity("alice", "app"), MetricTags("alice", "app")),
    (QuotaEntity("alice", DEFAULT), MetricTags("alice", "app")),
    (QuotaEntity("alice", None), MetricTags("alice", "")),
    (QuotaEntity(DEFAULT, "app"), MetricTags("alice", "app")),
    (QuotaEntity(DEFAULT, DEFAULT), MetricTags("alice", "app")),
    (QuotaEntity(DEFAULT, None), MetricTags("alice", "")),
    (QuotaEntity(None, "app"), MetricTags("", "app")),
    (QuotaEntity(None, DEFAULT), MetricTags("", "app")),
]


def test_precedence_is_kip55s_eight_levels() -> None:
    assert precedence("alice", "app") == LEVELS


@pytest.mark.parametrize("level", range(8))
def test_the_most_specific_entity_that_sets_the_quota_wins(level: int) -> None:
    # every level from ``level`` down sets a quota; ``level`` must win
    configs = _configs({entity: {PRODUCER_BYTE_RATE: 100.0 + i} for i, (entity, _) in enumerate(LEVELS) if i >= level})
    resolved = configs.resolve(PRODUCER_BYTE_RATE, "alice", "app")
    assert resolved is not None
    assert resolved.bound == 100.0 + level
    assert resolved.tags == LEVELS[level][1]


def test_each_quota_key_resolves_on_its_own() -> None:
    configs = _configs(
        {
            QuotaEntity("alice", None): {PRODUCER_BYTE_RATE: 10.0},
            QuotaEntity(None, DEFAULT): {CONSUMER_BYTE_RATE: 20.0, PRODUCER_BYTE_RATE: 99.0},
        }
    )
    assert configs.resolve(PRODUCER_BYTE_RATE, "alice", "app") == (10.0, MetricTags("alice", ""))
    assert configs.resolve(CONSUMER_BYTE_RATE, "alice", "app") == (20.0, MetricTags("", "app"))
    assert configs.resolve(PRODUCER_BYTE_RATE, "bob", "app") == (99.0, MetricTags("", "app"))
    assert configs.resolve(REQUEST_PERCENTAGE, "alice", "app") is None
    assert configs.enabled(PRODUCER_BYTE_RATE) and not configs.enabled(REQUEST_PERCENTAGE)


def test_a_change_drops_earlier_resolutions() -> None:
    configs = _configs({QuotaEntity(None, "app"): {PRODUCER_BYTE_RATE: 10.0}})
    assert configs.resolve(PRODUCER_BYTE_RATE, "u", "app") == (10.0, MetricTags("", "app"))
    changed: list[str] = []
    configs.listeners.append(changed.append)
    configs.set_entity(QuotaEntity("u", None), {PRODUCER_BYTE_RATE: 5.0})
    assert configs.resolve(PRODUCER_BYTE_RATE, "u", "app") == (5.0, MetricTags("u", ""))
    configs.set_entity(QuotaEntity("u", None), None)
    configs.set_entity(QuotaEntity(None, "app"), None)
    assert configs.resolve(PRODUCER_BYTE_RATE, "u", "app") is None
    assert not configs.enabled(PRODUCER_BYTE_RATE)
    assert changed == [PRODUCER_BYTE_RATE] * 3


# -- rates and throttle times --------------------------------------------------------------------


def test_throttle_time_is_kafkas_formula() -> None:
    # QuotaUtils: (observed - quota) / quota * window
    assert throttle_time_ms(100.0, 50.0, 3000.0) == 3000
    assert throttle_time_ms(50.0, 50.0, 3000.0) == 0


def test_rate_is_measured_over_at_least_num_minus_one_windows() -> None:
    rate = Rate(11, 1000.0)
    rate.record(10_000, 0.0)
    assert rate.window_size_ms(0.0) == 10_000.0
    assert rate.measure(0.0) == 1000.0
    # 15 s on: the first sample is gone (older than 11 windows)
    rate.record(500, 15_000.0)
    assert rate.measure(15_000.0) == 50.0
    # each sample starts at its first record; the span grows past num-1 windows
    rate = Rate(3, 1000.0)
    for t in (0.0, 1000.0, 2000.0):
        rate.record(100, t)
    assert rate.window_size_ms(2500.0) == 2500.0
    assert rate.measure(2500.0) == pytest.approx(300 / 2.5)


def _manager(configs: ClientQuotaConfigs, **kwargs: object) -> ClientQuotaManager:
    return ClientQuotaManager("produce", PRODUCER_BYTE_RATE, configs, clock=trio.current_time, **kwargs)  # type: ignore[arg-type]


def test_a_client_over_its_quota_is_throttled_until_its_rate_is_back_at_the_quota() -> None:
    async def main() -> None:
        configs = _configs({QuotaEntity(None, "app"): {PRODUCER_BYTE_RATE: 1000.0}})
        manager = _manager(configs)
        # 10 s window at least: 10 KB is exactly the quota, not over it
        assert manager.record("ANONYMOUS", "app", 10_000) == 0
        # 20 KB over 10 s is twice the quota: 10 s to bring it back
        throttle = manager.record("ANONYMOUS", "app", 10_000)
        assert throttle == 10_000
        await trio.sleep(throttle / 1000)
        # the rate, over the longer span, is back at the quota: not throttled for 1 byte more...
        assert manager.record("ANONYMOUS", "app", 1) > 0  # ...but 1 byte over it still is
        await trio.sleep(12)  # every sample has expired
        assert manager.record("ANONYMOUS", "app", 9000) == 0
        # another client id has no quota: never throttled, its rate recorded for the metrics
        assert manager.record("ANONYMOUS", "other", 10**9) == 0
        assert list(manager.sensors) == [MetricTags("", "app"), MetricTags("", "other")]
        rows = manager.samples_for_metrics()
        assert rows[0].throttled == 2 and rows[0].throttle_ms_total > 10_000
        assert (rows[1].tags, rows[1].throttled) == (MetricTags("", "other"), 0) and rows[1].rate > 0

    trio.run(main, clock=_clock())


@pytest.mark.parametrize(
    ("entities", "expected"),
    [
        # one kind of entity: an unlimited client is measured under the tags that kind gives it
        ([QuotaEntity(None, "app")], MetricTags("", "free")),
        ([QuotaEntity(None, "web"), QuotaEntity(None, "app")], MetricTags("", "free")),
        ([QuotaEntity("alice", None)], MetricTags("bob", "")),
        ([QuotaEntity(DEFAULT, "app")], MetricTags("bob", "free")),
        # several kinds: Kafka falls back to the client id's tags
        ([QuotaEntity("alice", None), QuotaEntity(None, "app")], MetricTags("", "free")),
        ([QuotaEntity("alice", None), QuotaEntity(DEFAULT, "app")], MetricTags("", "free")),
    ],
)
def test_clients_without_a_quota_are_recorded_under_kafkas_tags(
    entities: list[QuotaEntity], expected: MetricTags
) -> None:
    """Kafka's ClientQuotaManager records every client once the quota type is in use
    (``DefaultQuotaCallback.quotaMetricTags``), so unlimited clients' byte rates are in the
    metrics; they are never throttled, and a Fetch answered without records takes its bytes back."""

    async def main() -> None:
        configs = _configs({entity: {PRODUCER_BYTE_RATE: 10.0} for entity in entities})
        manager = _manager(configs)
        for _ in range(3):
            assert manager.record("bob", "free", 10**6) == 0
        assert manager.sensors[expected].rate.measure(trio.current_time() * 1000) == 3 * 10**6 / 10
        manager.unrecord("bob", "free", 10**6)
        assert manager.sensors[expected].rate.measure(trio.current_time() * 1000) == 2 * 10**6 / 10
        # no entity sets the quota any more: nothing is recorded
        for entity in entities:
            configs.set_entity(entity, None)
        assert manager.record("bob", "else", 10**6) == 0 and MetricTags("", "else") not in manager.sensors

    trio.run(main, clock=_clock())


def test_clients_of_one_user_share_the_users_rate_and_default_entities_do_not() -> None:
    async def main() -> None:
        configs = _configs(
            {
                QuotaEntity("alice", None): {PRODUCER_BYTE_RATE: 100.0},
                QuotaEntity(DEFAULT, None): {PRODUCER_BYTE_RATE: 100.0},
            }
        )
        manager = _manager(configs)
        assert manager.record("alice", "a", 1000) == 0
        assert manager.record("alice", "b", 1000) > 0  # alice's clients together are over
        assert manager.record("bob", "a", 1000) == 0  # the default quota is bob's own
        assert manager.record("carol", "a", 1000) == 0

    trio.run(main, clock=_clock())


def test_unrecord_and_the_largest_fetch_of_a_window() -> None:
    async def main() -> None:
        configs = _configs({QuotaEntity(None, "c"): {CONSUMER_BYTE_RATE: 1000.0}})
        manager = ClientQuotaManager("fetch", CONSUMER_BYTE_RATE, configs, samples=11, window_s=1.0)
        assert manager.max_value_in_window("u", "c") == 10_000
        assert manager.max_value_in_window("u", "other") is None
        throttle = manager.record("u", "c", 30_000)
        assert throttle == 20_000
        manager.unrecord("u", "c", 30_000)  # answered without records: they do not count
        assert manager.record("u", "c", 10_000) == 0

    trio.run(main, clock=_clock())


def test_a_bounded_manager_caps_the_throttle_time() -> None:
    async def main() -> None:
        configs = _configs({QuotaEntity(None, "c"): {PRODUCER_BYTE_RATE: 10.0}})
        manager = _manager(configs, max_throttle_ms=1000)
        assert manager.record("u", "c", 10**6) == 1000

    trio.run(main, clock=_clock())


def test_idle_sensors_expire() -> None:
    async def main() -> None:
        configs = _configs({QuotaEntity(None, DEFAULT): {PRODUCER_BYTE_RATE: 10.0}})
        manager = _manager(configs)
        manager.record("u", "a", 1)
        await trio.sleep(3601)
        manager.record("u", "b", 1)
        assert list(manager.sensors) == [MetricTags("", "b")]

    trio.run(main, clock=_clock())


# -- the cache over a metadata store, and the KIP-546 operations ----------------------------------


def _local_factory(tmp_path: Path) -> Callable[[], MetadataStore]:
    return lambda: LocalMetadataStore(tmp_path / FILE_NAME)


@pytest.fixture(params=["local", "zk", "etcd"])
def store_factory(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], MetadataStore]:
    if request.param == "local":
        return _local_factory(tmp_path)
    from odradek.testing import unique_chroot

    if request.param == "zk":
        from odradek.plugins.meta_zk.store import ZooKeeperMetadataStore

        server = request.getfixturevalue("zookeeper_server")
        connect = server.connect_string + unique_chroot("quotas")
        return lambda: ZooKeeperMetadataStore(connect)
    from odradek.plugins.meta_etcd.store import EtcdMetadataStore

    server = request.getfixturevalue("etcd_server")
    namespace = unique_chroot("quotas")
    return lambda: EtcdMetadataStore([server.endpoint], namespace=namespace)


async def _until(predicate: Callable[[], bool]) -> None:
    with trio.fail_after(10):
        while not predicate():
            await trio.sleep(0.01)


async def test_the_cache_follows_quotas_altered_through_any_broker(store_factory: Callable[[], MetadataStore]) -> None:
    writer, reader = store_factory(), store_factory()
    await writer.open(6000)
    await reader.open(6000)
    try:
        # a user with SCRAM credentials only, and a quota, before the cache starts
        await EntityConfigs(writer).alter("users", "alice", set={"SCRAM-SHA-256": "salt=x"})
        results = await alter_client_quotas(
            writer,
            [QuotaAlteration(((("user", "alice"),)), (QuotaOp(PRODUCER_BYTE_RATE, 1024, False),))],
            validate_only=False,
        )
        assert [r.error for r in results] == [0]
        configs = ClientQuotaConfigs(reader)
        await configs.load()
        assert configs.resolve(PRODUCER_BYTE_RATE, "alice", "x") == (1024.0, MetricTags("alice", ""))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(configs.run)
            await alter_client_quotas(
                writer,
                [
                    QuotaAlteration(
                        (("user", None), ("client-id", "app")), (QuotaOp(CONSUMER_BYTE_RATE, 2048, False),)
                    ),
                    QuotaAlteration((("user", "alice"),), (QuotaOp(PRODUCER_BYTE_RATE, 0, True),)),
                ],
                validate_only=False,
            )
            await _until(lambda: configs.resolve(CONSUMER_BYTE_RATE, "bob", "app") is not None)
            assert configs.resolve(CONSUMER_BYTE_RATE, "bob", "app") == (2048.0, MetricTags("bob", "app"))
            await _until(lambda: configs.resolve(PRODUCER_BYTE_RATE, "alice", "x") is None)
            nursery.cancel_scope.cancel()
        # the SCRAM credential stayed; the quota went
        assert await EntityConfigs(writer).get("users", "alice") == {"SCRAM-SHA-256": "salt=x"}
        described = await describe_client_quotas(writer, [], strict=False)
        assert [(d.entity, d.values) for d in described] == [
            ([("user", None), ("client-id", "app")], {CONSUMER_BYTE_RATE: 2048.0})
        ]
    finally:
        await reader.close()
        await writer.close()


async def test_alter_validates_as_kafka_does(tmp_path: Path) -> None:
    store = _local_factory(tmp_path)()
    await store.open(6000)
    try:
        user = (("user", "alice"),)
        bad = [
            QuotaAlteration(user, (QuotaOp("bogus", 1, False),)),
            QuotaAlteration(user, (QuotaOp(PRODUCER_BYTE_RATE, -1, False),)),
            QuotaAlteration(user, (QuotaOp(PRODUCER_BYTE_RATE, 1.5, False),)),
            QuotaAlteration(user, (QuotaOp(REQUEST_PERCENTAGE, float("nan"), False),)),
            QuotaAlteration((), (QuotaOp(PRODUCER_BYTE_RATE, 1, False),)),
            QuotaAlteration((("user", "a"), ("user", "b")), (QuotaOp(PRODUCER_BYTE_RATE, 1, False),)),
            QuotaAlteration((("ip", "1.2.3.4"), ("user", "a")), (QuotaOp("connection_creation_rate", 1, False),)),
            QuotaAlteration((("ip", "not-an-ip"),), (QuotaOp("connection_creation_rate", 1, False),)),
            QuotaAlteration((("ip", "1.2.3.4"),), (QuotaOp(PRODUCER_BYTE_RATE, 1, False),)),
            QuotaAlteration((("ip", "1.2.3.4"),), (QuotaOp("connection_creation_rate", 1.5, False),)),
            QuotaAlteration(user, (QuotaOp("connection_creation_rate", 1, False),)),
            QuotaAlteration((("group", "g"),), (QuotaOp(PRODUCER_BYTE_RATE, 1, False),)),
        ]
        good = QuotaAlteration(user, (QuotaOp(REQUEST_PERCENTAGE, 12.5, False),))
        results = await alter_client_quotas(store, [*bad, good], validate_only=False)
        assert [int(r.error) for r in results] == [42] * len(bad) + [0]
        assert results[0].message == "Invalid configuration key bogus"
        assert await EntityConfigs(store).get("users", "alice") == {REQUEST_PERCENTAGE: "12.5"}
        # validate_only writes nothing
        only = QuotaAlteration(user, (QuotaOp(PRODUCER_BYTE_RATE, 5, False),))
        assert [int(r.error) for r in await alter_client_quotas(store, [only], validate_only=True)] == [0]
        assert await EntityConfigs(store).get("users", "alice") == {REQUEST_PERCENTAGE: "12.5"}
    finally:
        await store.close()


async def test_ip_entities_hold_connection_creation_rate(tmp_path: Path) -> None:
    """KIP-612's ip entities: an address or the default, alone, with connection_creation_rate
    only; kept at /config/ips/<ip>, described by an ip filter (and by an empty one)."""
    store = _local_factory(tmp_path)()
    await store.open(6000)
    try:
        seen: list[tuple[dict[str, float], float | None]] = []
        cache = IpConnectionRates(store, lambda rates, default: seen.append((dict(rates), default)))
        await cache.load()
        rate = "connection_creation_rate"
        results = await alter_client_quotas(
            store,
            [
                QuotaAlteration((("ip", "10.0.0.7"),), (QuotaOp(rate, 5, False),)),
                QuotaAlteration((("ip", None),), (QuotaOp(rate, 50, False),)),
                QuotaAlteration((("ip", "::ffff:10.0.0.8"),), (QuotaOp(rate, 0, False),)),
            ],
            validate_only=False,
            ip_cache=cache,
        )
        assert [int(r.error) for r in results] == [0, 0, 0]
        assert seen[-1] == ({"10.0.0.7": 5.0, "10.0.0.8": 0.0}, 50.0)
        stored = await store.get("/config/ips/10.0.0.7")
        assert stored is not None and json.loads(stored.value) == {"version": 1, "config": {rate: "5"}}
        exact = await describe_client_quotas(store, [("ip", 0, "10.0.0.7")], strict=False)
        assert [(d.entity, d.values) for d in exact] == [([("ip", "10.0.0.7")], {rate: 5.0})]
        default = await describe_client_quotas(store, [("ip", 1, None)], strict=False)
        assert [d.entity for d in default] == [[("ip", None)]]
        assert len(await describe_client_quotas(store, [("ip", 2, None)], strict=False)) == 2
        assert len(await describe_client_quotas(store, [], strict=False)) == 3
        with pytest.raises(QuotaRequestError, match="IP filter component should not be used"):
            await describe_client_quotas(store, [("ip", 2, None), ("user", 2, None)], strict=False)
        removed = await alter_client_quotas(
            store, [QuotaAlteration((("ip", "10.0.0.7"),), (QuotaOp(rate, 0, True),))], validate_only=False,
            ip_cache=cache,
        )  # fmt: skip
        assert [int(r.error) for r in removed] == [0] and await store.get("/config/ips/10.0.0.7") is None
        assert seen[-1] == ({"10.0.0.8": 0.0}, 50.0)
        fresh = IpConnectionRates(store, lambda rates, default: None)
        await fresh.load()
        assert (fresh.rates, fresh.default) == ({"10.0.0.8": 0.0}, 50.0)
    finally:
        await store.close()


async def test_describe_filters_by_component_and_strictness(tmp_path: Path) -> None:
    store = _local_factory(tmp_path)()
    await store.open(6000)
    try:
        entities = [
            (("user", "alice"),),
            (("user", "alice"), ("client-id", "app")),
            (("user", None),),
            (("client-id", "app"),),
            (("client-id", None),),
        ]
        await alter_client_quotas(
            store,
            [QuotaAlteration(e, (QuotaOp(PRODUCER_BYTE_RATE, 100, False),)) for e in entities],
            validate_only=False,
        )

        async def described(
            components: list[tuple[str, int, str | None]], strict: bool
        ) -> list[list[tuple[str, str | None]]]:
            return [d.entity for d in await describe_client_quotas(store, components, strict=strict)]

        assert len(await described([], False)) == 5
        assert await described([("user", MATCH_EXACT, "alice")], True) == [[("user", "alice")]]
        assert await described([("user", MATCH_EXACT, "alice")], False) == [
            [("user", "alice")],
            [("user", "alice"), ("client-id", "app")],
        ]
        assert await described([("user", MATCH_DEFAULT, None)], False) == [[("user", None)]]
        assert await described([("client-id", MATCH_SPECIFIED, None)], True) == [[("client-id", "app")]]
        with pytest.raises(QuotaRequestError):
            await described([("user", MATCH_EXACT, None)], False)
        with pytest.raises(QuotaRequestError):
            await described([("user", 1, None), ("user", 2, None)], False)
    finally:
        await store.close()


def test_to_entity_names_the_default_by_null() -> None:
    assert to_entity((("user", None), ("client-id", "c"))) == QuotaEntity(DEFAULT, "c")


def test_quota_managers_are_built_from_the_config_windows() -> None:
    managers = QuotaManagers.build(_configs({}), samples=2, window_s=3.0)
    assert managers.produce.samples == 2 and managers.fetch.window_ms == 3000.0
    assert managers.metric_samples() == []


# -- the connection: throttle_time_ms in the response, then the mute (KIP-219) --------------------


def _scripted_with_quotas(tmp_path: Path, entities: dict[QuotaEntity, dict[str, float]]) -> Any:
    from test_transport_tcp import ScriptedBroker, _config

    records_file = tmp_path / "records"
    records_file.write_bytes(bytes(range(256)))
    broker = ScriptedBroker(_config(), records_file)
    broker.quotas = QuotaManagers.build(_configs(entities), samples=11, window_s=1.0)
    return broker


async def _send(sock: trio.socket.SocketType, request: Any, correlation_id: int, client_id: str) -> None:
    frame = encode_request(request, correlation_id=correlation_id, client_id=client_id)
    await sock.send(struct.pack(">i", len(frame)) + frame)


async def _receive(sock: trio.socket.SocketType) -> bytes:
    async def exactly(n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = await sock.recv(n - len(out))
            assert chunk, "connection closed"
            out += chunk
        return out

    (size,) = struct.unpack(">i", await exactly(4))
    return await exactly(size)


async def test_a_throttled_produce_is_answered_at_once_then_the_connection_is_muted(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    from test_transport_tcp import _paired, metadata_request

    broker = _scripted_with_quotas(tmp_path, {QuotaEntity(None, "p"): {PRODUCER_BYTE_RATE: 1.0}})
    conn, client = _paired(broker)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(conn.run)
        produce = ProduceRequestData(
            1, 1000, [TopicProduceData("t", [PartitionProduceData(0, bytearray(100))])], None, 7
        )
        start = trio.current_time()
        await _send(client, produce, 1, "p")
        cid, response = decode_response(ApiKey.PRODUCE, 7, await _receive(client))
        # the whole request is counted, header and body (Kafka's request.sizeInBytes), not only
        # its 100 bytes of records: over at least 10 s, then the time back to 1 B/s
        size = len(encode_request(produce, correlation_id=1, client_id="p"))
        assert size > 100
        assert cid == 1 and response.throttle_time_ms == round((size / 10 - 1) * 10_000)
        assert trio.current_time() - start < 1  # the answer is not held back
        # sent after the throttled answer (one the connection had already read ahead would be
        # served), so it is read only once the mute is over
        await _send(client, metadata_request(), 2, "p")
        cid, _ = decode_response(ApiKey.METADATA, 8, await _receive(client))
        assert cid == 2 and trio.current_time() - start >= 90  # the next request waited out the mute
        # another client on its own connection is not limited
        nursery.cancel_scope.cancel()
    client.close()
    assert broker.quotas.produce.sensors[MetricTags("", "p")].throttled == 1


async def test_a_throttled_fetch_is_answered_without_records(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    from test_protocol import sample
    from test_transport_tcp import _paired, _replace

    broker = _scripted_with_quotas(tmp_path, {QuotaEntity(DEFAULT, "c"): {CONSUMER_BYTE_RATE: 1.0}})
    conn, client = _paired(broker)
    fetch = _replace(
        sample(request_type(ApiKey.FETCH, 11)), session_id=0, session_epoch=-1, isolation_level=0, replica_id=-1
    )
    async with trio.open_nursery() as nursery:
        nursery.start_soon(conn.run)
        await _send(client, fetch, 1, "c")
        _, response = decode_response(ApiKey.FETCH, 11, await _receive(client))
        # the scripted broker's slices are 50 bytes a partition: over the quota, so no records
        assert response.throttle_time.total_seconds() > 0
        assert response.responses == () and response.session_id == 0
        assert all(s.released == 1 for s in broker.slices)
        # a follower's fetch is replication, never throttled
        await _send(client, _replace(fetch, replica_id=2), 2, "c")
        _, response = decode_response(ApiKey.FETCH, 11, await _receive(client))
        assert response.throttle_time.total_seconds() == 0 and response.responses != ()
        nursery.cancel_scope.cancel()
    client.close()


async def test_a_request_quota_throttles_by_thread_time_for_one_window_at_most(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    from test_transport_tcp import _paired, api_versions_request, metadata_request

    broker = _scripted_with_quotas(tmp_path, {})
    assert broker.quotas.meter is None  # nothing timed without a request quota
    # a vanishing share of a thread: any request is over it
    broker.quotas.configs.set_entity(QuotaEntity(None, "r"), {REQUEST_PERCENTAGE: 1e-9})
    assert broker.quotas.meter is not None
    conn, client = _paired(broker)
    free_conn, free_client = _paired(broker)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(conn.run)
        nursery.start_soon(free_conn.run)
        start = trio.current_time()
        await _send(client, metadata_request(), 1, "r")
        _, response = decode_response(ApiKey.METADATA, 8, await _receive(client))
        assert response.throttle_time.total_seconds() == 1.0  # bounded by quota.window.size.seconds
        # sent after the throttled answer (one already read when the throttle was set would be
        # served: the connection reads ahead), so it is read only once the mute is over
        await _send(client, api_versions_request(), 2, "r")
        _, response = decode_response(ApiKey.API_VERSIONS, 3, await _receive(client))
        assert response.throttle_time.total_seconds() == 0  # exempt, but read after the mute
        assert trio.current_time() - start >= 1.0
        await _send(free_client, metadata_request(), 1, "free")
        _, response = decode_response(ApiKey.METADATA, 8, await _receive(free_client))
        assert response.throttle_time.total_seconds() == 0
        nursery.cancel_scope.cancel()
    client.close()
    free_client.close()
    broker.quotas.configs.set_entity(QuotaEntity(None, "r"), None)
    assert broker.quotas.meter is None


def test_the_fetch_response_size_is_the_envelope_after_its_size_prefix() -> None:
    """Kafka's FetchResponse.sizeOf, computed without building the response, for every version."""
    responses = [
        FetchTopicData(
            "t", [FetchPartitionData(0, records=b"x" * 37), FetchPartitionData(1, records=None)], topic_id=b"i" * 16
        ),
        FetchTopicData(
            "ü-topic",
            [
                FetchPartitionData(2, aborted_transactions=[(1, 2), (3, 4)], records=b"y" * 5),
                FetchPartitionData(3, error_code=6, records=b"z" * 300, current_leader=(2, 7)),
            ],
            topic_id=b"j" * 16,
        ),
    ]
    shapes: list[tuple[str, list[Any]]] = [
        ("t", [(0, 37), (0, 0)]),
        ("ü-topic", [(2, 5), (0, 300, (2, 7))]),
    ]
    for version in FETCH_ENVELOPE_VERSIONS:
        envelope = build_fetch_envelope(version, 9, FetchResponseData(responses, 5, 0, 3))
        assert fetch_response_size(version, shapes) == envelope.size - 4, version
    assert fetch_response_size(11, []) == len(build_fetch_envelope(11, 1, FetchResponseData()).to_bytes()) - 4


def _fetch_request(**changes: Any) -> Any:
    from test_protocol import sample
    from test_transport_tcp import _replace

    request = sample(request_type(ApiKey.FETCH, 11))
    return _replace(
        request, **{"session_id": 0, "session_epoch": -1, "isolation_level": 0, "replica_id": -1, **changes}
    )


async def test_a_fetch_is_charged_its_whole_response(tmp_path: Path, autojump_clock: trio.testing.MockClock) -> None:
    """consumer_byte_rate counts what the answer takes on the wire (Kafka's FetchResponse.sizeOf:
    correlation id, throttle time, session, topic names, partition headers and records)."""
    from test_transport_tcp import _paired

    broker = _scripted_with_quotas(tmp_path, {QuotaEntity(None, "c"): {CONSUMER_BYTE_RATE: 1e9}})
    conn, client = _paired(broker)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(conn.run)
        await _send(client, _fetch_request(), 1, "c")
        raw = await _receive(client)
        _, response = decode_response(ApiKey.FETCH, 11, raw)
        records = sum(len(p.records or b"") for t in response.responses for p in t.partitions)
        assert records > 0 and response.throttle_time.total_seconds() == 0
        (sensors,) = broker.quotas.fetch.sensors.values()
        assert sensors.rate.stat.total(trio.current_time() * 1000)[0] == len(raw) > records
        nursery.cancel_scope.cancel()
    client.close()


async def test_a_fetch_over_the_request_quota_alone_is_answered_without_records(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """KIP-219 as Kafka's handleFetchRequest: the larger of the bandwidth and request throttle
    times decides; a consumer throttled by its request_percentage alone gets no records either,
    and the bytes it was charged are taken back. A Produce over it is still appended."""
    from test_transport_tcp import _paired

    broker = _scripted_with_quotas(tmp_path, {})
    # set once the managers exist: the request quota's meter is installed with it
    broker.quotas.configs.set_entity(QuotaEntity(None, "r"), {REQUEST_PERCENTAGE: 1e-9, CONSUMER_BYTE_RATE: 1e9})
    conn, client = _paired(broker)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(conn.run)
        start = trio.current_time()
        await _send(client, _fetch_request(), 1, "r")
        _, response = decode_response(ApiKey.FETCH, 11, await _receive(client))
        assert response.throttle_time.total_seconds() == 1.0  # the request quota's, one window at most
        assert response.responses == () and response.session_id == 0
        assert broker.slices and all(s.released == 1 for s in broker.slices)
        (fetch_sensors,) = broker.quotas.fetch.sensors.values()
        assert fetch_sensors.rate.stat.total(trio.current_time() * 1000)[0] == 0  # unrecorded
        assert fetch_sensors.throttled == 0  # not the byte rate's throttle
        (request_sensors,) = broker.quotas.request.sensors.values()
        assert request_sensors.throttled == 1  # recorded once, by the handler, not again after it
        # a follower's fetch is replication: exempt from both (read once the mute is over)
        await _send(client, _fetch_request(replica_id=2), 2, "r")
        _, response = decode_response(ApiKey.FETCH, 11, await _receive(client))
        assert response.throttle_time.total_seconds() == 0 and response.responses != ()
        assert trio.current_time() - start >= 1.0
        produce = ProduceRequestData(
            1, 1000, [TopicProduceData("t", [PartitionProduceData(0, bytearray(10))])], None, 7
        )
        await _send(client, produce, 3, "r")
        _, response = decode_response(ApiKey.PRODUCE, 7, await _receive(client))
        assert response.throttle_time_ms == 1000 and len(broker.produced) == 1  # throttled, appended
        assert request_sensors.throttled == 2
        nursery.cancel_scope.cancel()
    client.close()


async def test_a_request_over_both_quotas_waits_the_longer_time_counted_on_that_quota_alone(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """Kafka's maxThrottleTimeMs: a Produce over producer_byte_rate (tens of seconds) and over
    request_percentage (one window at most) is throttled for the byte rate's time, and only the
    byte rate's throttle metrics count it (requestHelper.throttle)."""
    from test_transport_tcp import _paired

    broker = _scripted_with_quotas(tmp_path, {})
    quotas = broker.quotas
    quotas.configs.set_entity(QuotaEntity(None, "b"), {REQUEST_PERCENTAGE: 1e-9, PRODUCER_BYTE_RATE: 1.0})
    conn, client = _paired(broker)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(conn.run)
        partitions = [TopicProduceData("t", [PartitionProduceData(0, bytearray(100))])]
        await _send(client, ProduceRequestData(1, 1000, partitions, None, 7), 1, "b")
        _, response = decode_response(ApiKey.PRODUCE, 7, await _receive(client))
        assert response.throttle_time_ms > 1000
        ((tags, produce),) = quotas.produce.sensors.items()
        assert (produce.throttled, produce.throttle_ms_total) == (1, response.throttle_time_ms)
        assert quotas.request.sensors[tags].throttled == 0  # recorded, but not the time waited
        nursery.cancel_scope.cancel()
    client.close()
