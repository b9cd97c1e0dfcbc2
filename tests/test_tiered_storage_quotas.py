"""Quotas on remote storage traffic (KIP-956): the sampled rate against its bound under a
clock the test drives, and in one broker without sockets: copies wait while the copy quota is
exceeded (until the dynamic config raises it), and a fetch's remote read is not started while
the fetch quota is exceeded (the partition is answered without records) while local reads go on.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
from broker_harness import fetch_records
from test_replication_quota import _alter, _Clock
from test_tiered_storage import (
    TP,
    finished,
    produce_values,
    read_all,
    rlm,
    tiered_and_trimmed,
    tiered_broker,
    tiered_topic,
)

from odradek.broker.api import AlterConfigOp, FetchPartition, IsolationLevel
from odradek.broker.core import BrokerCore
from odradek.broker.remote_quota import RemoteQuota
from odradek.config import LONG_MAX
from odradek.errors import ErrorCode

COPY_RATE = "remote.log.manager.copy.max.bytes.per.second"
FETCH_RATE = "remote.log.manager.fetch.max.bytes.per.second"


def test_a_remote_quota_measures_kafkas_sampled_rate() -> None:
    clock = _Clock()
    unlimited = RemoteQuota(clock=clock)
    unlimited.record(10**12)
    assert not unlimited.enabled and not unlimited.is_quota_exceeded() and unlimited.throttle_time_ms() == 0
    quota = RemoteQuota(100, samples=11, window_s=1.0, clock=clock)
    quota.record(1000)  # over at least 10 windows (10 s): 100 B/s, not above the bound
    assert not quota.is_quota_exceeded() and quota.throttle_time_ms() == 0
    quota.record(1000)  # 200 B/s: 1 s over the bound for every second measured
    assert quota.is_quota_exceeded()
    assert quota.throttle_time_ms() == 10_000  # QuotaUtils.throttleTime: (200 - 100) / 100 * 10 s
    clock.now += 5.0  # still measured over 10 windows (Rate.windowSize's minimum)
    assert quota.throttle_time_ms() == 10_000
    clock.now += 20.0  # every sample is older than the whole span: purged
    assert not quota.is_quota_exceeded()
    quota.update_quota(LONG_MAX)
    quota.record(10**9)
    assert not quota.is_quota_exceeded()


async def set_broker_rate(core: BrokerCore, key: str, value: int | None) -> None:
    """A dynamic broker config of this broker: SET, or DELETE (back to the static value) with None."""
    op = AlterConfigOp.SET if value is not None else AlterConfigOp.DELETE
    [done] = await core.incremental_alter_configs([_alter("0", (key, op, str(value)))], False)
    assert done.error == ErrorCode.NONE, done.error_message


@pytest.mark.trio
async def test_copies_wait_for_the_copy_quota(tmp_path: Path) -> None:
    async with tiered_broker(tmp_path, **{COPY_RATE: 1}) as core:
        manager = rlm(core)
        assert manager.copy_quota.bound == 1
        await tiered_topic(core)
        await produce_values(core, 0, 12)
        log = core.replica_manager.partitions[TP].log
        rolled = len(log.rolled_segments(log.log_end_offset))
        assert rolled >= 3
        async with trio.open_nursery() as nursery:
            nursery.start_soon(manager.run_once)
            with trio.fail_after(30):  # what must happen at once; not a timing
                while manager.metrics.copy_throttles == 0:
                    await trio.sleep(0.01)
            # the first segment went (nothing was copied before it), then the rate is over 1 B/s
            assert manager.metrics.copy_segments == 1 and len(finished(core)) == 1
            assert manager.metrics.copy_throttle_ms > 0
            await set_broker_rate(core, COPY_RATE, 10**9)  # dynamic: the waiting copy looks again
        assert manager.copy_quota.bound == 10**9
        assert manager.metrics.copy_segments == rolled and len(finished(core)) == rolled


@pytest.mark.trio
async def test_remote_reads_stop_while_the_fetch_quota_is_exceeded(tmp_path: Path) -> None:
    async with tiered_broker(tmp_path) as core:
        values = await tiered_and_trimmed(core)
        manager = rlm(core)
        await set_broker_rate(core, FETCH_RATE, 1)
        first = await fetch_records(core, TP, 0)  # the quota is not exceeded yet: read
        assert first and [r.value for r in first] == values[: len(first)]
        assert manager.metrics.fetch_throttles == 0
        wanted = [FetchPartition(TP, 0, 1 << 20)]
        held = (await core.fetch(-1, 0, 0, 1 << 20, IsolationLevel.READ_UNCOMMITTED, wanted))[TP]
        assert (held.error, held.records) == (ErrorCode.NONE, None)  # over 1 B/s now: no records, no error
        assert manager.metrics.fetch_throttles == 1
        local_start = core.replica_manager.partitions[TP].local_log_start_offset
        assert [r.value for r in await fetch_records(core, TP, local_start)] == values[local_start:]
        await set_broker_rate(core, FETCH_RATE, None)  # back to no limit
        assert not manager.fetch_quota.enabled
        assert await read_all(core) == list(enumerate(values))
