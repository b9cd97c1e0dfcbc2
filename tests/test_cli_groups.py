"""``odradek groups``: argument parsing and the reset-offsets plan (no broker needed; the commands
against a live broker are in test_groups_clients.py)."""

from __future__ import annotations

import datetime

import pytest

from odradek.cli import build_parser
from odradek.cli.groups import GroupsCommandError, format_table, parse_datetime_ms, parse_topic_spec, plan_reset
from odradek.interfaces import TopicPartition

T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)
EARLIEST = {T0: 10, T1: 0}
LATEST = {T0: 100, T1: 50}
COMMITTED = {T0: 40}


def plan(strategy: str, **kw: object) -> list[tuple[int | None, int]]:
    return [(p.current, p.new) for p in plan_reset([T1, T0], COMMITTED, EARLIEST, LATEST, strategy=strategy, **kw)]  # type: ignore[arg-type]


def test_reset_strategies_clamp_to_the_log() -> None:
    assert plan("earliest") == [(40, 10), (None, 0)]
    assert plan("latest") == [(40, 100), (None, 50)]
    assert plan("current") == [(40, 40), (None, 50)]
    assert plan("offset", value=5) == [(40, 10), (None, 5)]
    assert plan("offset", value=500) == [(40, 100), (None, 50)]
    assert plan("shift", value=-35) == [(40, 10), (None, 15)]
    assert plan("shift", value=100) == [(40, 100), (None, 50)]
    assert plan("datetime", by_time={T0: 70, T1: -1}) == [(40, 70), (None, 50)]


def test_topic_specs_and_datetimes() -> None:
    assert parse_topic_spec("orders") == ("orders", None)
    assert parse_topic_spec("orders:2,0,2") == ("orders", [0, 2])
    with pytest.raises(GroupsCommandError):
        parse_topic_spec("orders:x")
    with pytest.raises(GroupsCommandError):
        parse_topic_spec(":1")
    utc = datetime.datetime(2024, 5, 1, 12, 0, tzinfo=datetime.UTC)
    assert parse_datetime_ms("2024-05-01T12:00:00Z") == int(utc.timestamp() * 1000)
    assert parse_datetime_ms("2024-05-01T14:00:00.000+02:00") == int(utc.timestamp() * 1000)
    with pytest.raises(GroupsCommandError):
        parse_datetime_ms("yesterday")


def test_table_and_parser() -> None:
    assert format_table(("A", "LONGER"), [("x", None), ("yyyy", 3)]).splitlines() == [
        "A     LONGER",
        "x     -",
        "yyyy  3",
    ]
    args = build_parser().parse_args(
        ["groups", "reset-offsets", "g", "--topic", "t:1", "--shift-by", "-3", "--bootstrap-server", "h:1"]
    )
    assert (args.group, args.topic, args.shift_by, args.execute) == ("g", ["t:1"], -3, False)
    with pytest.raises(SystemExit):  # a reset strategy is required
        build_parser().parse_args(["groups", "reset-offsets", "g", "--all-topics", "--bootstrap-server", "h:1"])
