"""``odradek groups``: argument parsing and the reset-offsets plan (no broker needed; the commands
against a live broker are in test_groups_clients.py)."""

from __future__ import annotations

import datetime
from types import SimpleNamespace

import pytest

from odradek.cli import build_parser
from odradek.cli import groups as groups_cli
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


class _StaleOffsetsAdmin:
    """An admin client whose group has an offset of a topic that no longer exists (deleted while
    the broker did not coordinate the group, or on another Kafka)."""

    live, gone = TopicPartition("live", 0), TopicPartition("gone", 0)

    async def __aenter__(self) -> _StaleOffsetsAdmin:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    async def describe_groups(self, groups: list[str], timeout: float | None = None) -> dict[str, object]:
        return {
            g: SimpleNamespace(state="Empty", protocol="", members=[], coordinator=0, group_type="classic")
            for g in groups
        }

    async def list_consumer_group_offsets(
        self, group: str, timeout: float | None = None
    ) -> dict[TopicPartition, object]:
        return {self.live: SimpleNamespace(offset=3), self.gone: SimpleNamespace(offset=5)}

    async def list_topics(self, include_internal: bool = False, timeout: float | None = None) -> dict[str, int]:
        return {"live": 1}

    async def list_offsets(
        self, specs: dict[TopicPartition, object], timeout: float | None = None
    ) -> dict[TopicPartition, object]:
        assert set(specs) == {self.live}, "asked the log end of a partition that does not exist"
        return {self.live: SimpleNamespace(offset=10)}


def test_describe_shows_offsets_of_a_topic_that_is_gone(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The committed offset is shown with "-" for the log end and lag, instead of the command
    waiting for a leader that will never come (it used to time out and print nothing)."""
    monkeypatch.setattr(groups_cli, "_admin", lambda args: _StaleOffsetsAdmin())
    args = build_parser().parse_args(["groups", "describe", "g", "--bootstrap-server", "127.0.0.1:1"])
    assert args.func(args) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines() if line.startswith("g ")]
    assert [r[1:6] for r in rows] == [["gone", "0", "5", "-", "-"], ["live", "0", "3", "10", "7"]]


@pytest.mark.parametrize(
    ("argv", "expect"),
    [
        (["reset-offsets", "--group", "g", "--all-topics", "--to-earliest"], ("group", "g")),
        (["reset-offsets", "g", "--all-topics", "--to-earliest"], ("group", "g")),
        (["reset-offsets", "g", "--group", "g", "--all-topics", "--to-earliest"], ("group", "g")),
        (["delete-offsets", "--group", "g", "--topic", "t"], ("group", "g")),
        (["delete", "--group", "a", "--group", "b"], ("groups", ["a", "b"])),
        (["delete", "a", "b"], ("groups", ["a", "b"])),
        (["describe", "a", "--group", "b"], ("groups", ["a", "b"])),
    ],
)
def test_group_as_positional_or_kafka_style_option(argv: list[str], expect: tuple[str, object]) -> None:
    """``kafka-consumer-groups --group G`` spelling works as well as the positional GROUP."""
    args = build_parser().parse_args(["groups", *argv, "--bootstrap-server", "h:1"])
    assert getattr(args, expect[0]) == expect[1]
    assert not hasattr(args, "group_option") and not hasattr(args, "group_options")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["delete"], "a group is required: GROUP or --group GROUP"),
        (["reset-offsets", "--all-topics", "--to-earliest"], "a group is required"),
        (["reset-offsets", "a", "--group", "b", "--all-topics", "--to-earliest"], "two groups given"),
        (["delete", "g", "--bogus"], "unrecognized arguments: --bogus"),
    ],
)
def test_subcommand_errors_show_the_subcommands_usage(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        build_parser().parse_args(["groups", *argv, "--bootstrap-server", "h:1"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert f"usage: odradek groups {argv[0]}" in err and f"odradek groups {argv[0]}: error: {message}" in err
