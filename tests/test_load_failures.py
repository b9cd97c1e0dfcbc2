"""How the coordinators report a failed load of an internal-topic partition: a leadership still
moving to this broker is one INFO line (a normal moment of an election, which the cluster tests
read as a clean log), anything else one ERROR with its traceback; both at most once a minute after."""

from __future__ import annotations

import logging

import pytest

from odradek.broker.load_failures import FAILED_LOAD_LOG_INTERVAL_S, FailedLoads, leadership_moving
from odradek.errors import ErrorCode, KafkaError, KafkaStorageError

log = logging.getLogger("odradek.test.loads")


def _records(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str, bool]]:
    out = [(r.levelno, r.getMessage(), r.exc_info is not None) for r in caplog.records]
    caplog.clear()
    return out


def test_a_partition_not_led_here_yet_is_an_info_line_without_traceback(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=log.name)
    loads = FailedLoads(log, "__consumer_offsets")
    moving = KafkaError("reading __consumer_offsets-0: no offset for -2", code=ErrorCode.NOT_LEADER_OR_FOLLOWER)
    loads.failed(0, moving, now=10.0)
    [(level, message, traced)] = _records(caplog)
    assert (level, traced) == (logging.INFO, False)
    assert "__consumer_offsets-0" in message and "NOT_LEADER_OR_FOLLOWER" in message
    assert 0 in loads


def test_any_other_failure_logs_its_traceback(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=log.name)
    loads = FailedLoads(log, "__transaction_state")
    try:
        raise KafkaStorageError("disk gone")
    except KafkaStorageError as exc:
        loads.failed(3, exc, now=0.0)
    [(level, message, traced)] = _records(caplog)
    assert (level, traced) == (logging.ERROR, True)
    assert message == "loading __transaction_state-3 failed; the next ownership check retries"


def test_a_failure_that_persists_is_logged_once_a_minute_and_a_load_resets_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger=log.name)
    loads = FailedLoads(log, "__consumer_offsets")
    exc = RuntimeError("unreadable")
    loads.failed(1, exc, now=0.0)
    loads.failed(1, exc, now=1.0)
    loads.failed(1, exc, now=FAILED_LOAD_LOG_INTERVAL_S - 0.5)
    assert [level for level, _, _ in _records(caplog)] == [logging.ERROR]
    loads.failed(1, exc, now=FAILED_LOAD_LOG_INTERVAL_S + 0.5)
    [(level, message, traced)] = _records(caplog)
    assert (level, traced) == (logging.WARNING, False)
    assert "still fails" in message
    loads.failed(2, exc, now=FAILED_LOAD_LOG_INTERVAL_S + 1)  # partitions are counted apart
    assert [level for level, _, _ in _records(caplog)] == [logging.ERROR]
    loads.loaded(1)
    assert 1 not in loads
    loads.failed(1, exc, now=FAILED_LOAD_LOG_INTERVAL_S + 2)
    assert [(level, traced) for level, _, traced in _records(caplog)] == [(logging.ERROR, True)]


@pytest.mark.parametrize(
    ("exc", "moving"),
    [
        (KafkaError(code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        (KafkaError(code=ErrorCode.FENCED_LEADER_EPOCH), ErrorCode.FENCED_LEADER_EPOCH),
        (KafkaError(code=ErrorCode.KAFKA_STORAGE_ERROR), None),
        (KafkaError(code=ErrorCode.CORRUPT_MESSAGE), None),
        (OSError("EIO"), None),
    ],
)
def test_only_leadership_codes_count_as_moving(exc: Exception, moving: ErrorCode | None) -> None:
    assert leadership_moving(exc) is moving
