"""``odradek topics``, ``odradek produce`` and ``odradek consume``: Kafka's console tools' flags.

The line reader and the formatter are tested without a broker; the commands run against the
session broker, in-process through ``odradek.cli.main`` and once as a real subprocess pipe.
"""

from __future__ import annotations

import io
import re
import subprocess
import sys
from types import SimpleNamespace

import pytest

from odradek.cli import main
from odradek.cli.consume import ConsumeCommandError, Formatter
from odradek.cli.produce import LineReader, ProduceCommandError
from odradek.testing import BrokerProcess, unique_topic


def test_line_reader_keys_headers_and_errors() -> None:
    reader = LineReader.from_properties({"parse.key": "true", "key.separator": ":"}, {"src": "cli"})
    assert reader.parse("k1:v:1", 1) == (b"k1", b"v:1", [("src", b"cli")])
    with pytest.raises(ProduceCommandError, match="line 2"):
        reader.parse("no-separator", 2)
    lenient = LineReader.from_properties({"parse.key": "true", "ignore.error": "true"}, {})
    assert lenient.parse("just a value", 1) == (None, b"just a value", [])
    headed = LineReader.from_properties({"parse.headers": "true", "null.marker": "NULL"}, {})
    assert headed.parse("a:1,b:NULL,c\tvalue", 1) == (None, b"value", [("a", b"1"), ("b", None), ("c", None)])
    with pytest.raises(ProduceCommandError, match="unknown --property 'parse.keys'"):
        LineReader.from_properties({"parse.keys": "true"}, {})


def test_formatter_follows_kafkas_default_message_formatter() -> None:
    record = SimpleNamespace(timestamp=1700, timestamp_type=0, partition=2, offset=7, key=None, value=b"v",
                             headers=(("h", b"x"), ("n", None)))  # fmt: skip
    everything = Formatter.from_properties(
        {
            "print.timestamp": "true",
            "print.partition": "true",
            "print.offset": "true",
            "print.headers": "true",
            "print.key": "true",
            "key.separator": " | ",
        }
    )
    assert everything.format(record) == b"CreateTime:1700 | Partition:2 | Offset:7 | h:x,n:null | null | v\n"
    assert Formatter.from_properties({}).format(record) == b"v\n"
    keys_only = Formatter.from_properties({"print.key": "true", "print.value": "false", "line.separator": "\\n--\\n"})
    assert keys_only.format(record) == b"null\n--\n"
    with pytest.raises(ConsumeCommandError, match="print.keys"):
        Formatter.from_properties({"print.keys": "true"})


@pytest.mark.integration
def test_topics_lifecycle(odradek_broker: BrokerProcess, capsys: pytest.CaptureFixture[str]) -> None:
    topic = unique_topic("cli")
    boot = ["--bootstrap-server", odradek_broker.bootstrap]
    assert (
        main(["topics", "create", *boot, "--topic", topic, "--partitions", "2", "--config", "retention.ms=90000"]) == 0
    )
    assert f"Created topic {topic}." in capsys.readouterr().out
    assert main(["topics", "create", *boot, "--topic", topic]) == 1
    assert "TOPIC_ALREADY_EXISTS" in capsys.readouterr().err
    assert main(["topics", "create", *boot, "--topic", topic, "--if-not-exists"]) == 0
    assert main(["topics", "list", *boot]) == 0
    assert topic in capsys.readouterr().out.split()
    assert (
        main(["topics", "alter", *boot, "--topic", topic, "--partitions", "3", "--config", "cleanup.policy=compact"])
        == 0
    )
    assert main(["topics", "describe", *boot, "--topic", topic]) == 0
    out = capsys.readouterr().out
    # the topic id as Kafka's tools print it (22 URL-safe base64 characters)
    assert re.search(rf"Topic: {topic}\tTopicId: [A-Za-z0-9_-]{{22}}\tPartitionCount: 3\tReplicationFactor: 1\t", out)
    assert "cleanup.policy=compact" in out and "retention.ms=90000" in out
    assert f"\tTopic: {topic}\tPartition: 2\tLeader: 0\tReplicas: 0\tIsr: 0" in out
    assert main(["topics", "alter", *boot, "--topic", topic, "--delete-config", "retention.ms"]) == 0
    assert main(["topics", "delete", *boot, "--topic", topic]) == 0
    assert main(["topics", "delete", *boot, "--topic", topic, "--if-exists"]) == 0
    assert main(["topics", "describe", *boot, "--topic", topic]) == 1
    assert "does not exist" in capsys.readouterr().err


@pytest.mark.integration
def test_produce_lines_and_consume_them_back(
    odradek_broker: BrokerProcess, monkeypatch: pytest.MonkeyPatch, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    topic = unique_topic("lines")
    boot = ["--bootstrap-server", odradek_broker.bootstrap]
    monkeypatch.setattr(sys, "stdin", io.StringIO("alpha:one\nbeta:two\ngamma:three\n"))
    code = main(["produce", *boot, "--topic", topic, "--property", "parse.key=true", "--property", "key.separator=:",
                 "--header", "origin=test", "--compression", "zstd", "--sync"])  # fmt: skip
    assert code == 0
    capsysbinary.readouterr()
    code = main(["consume", *boot, "--topic", topic, "--from-beginning", "--max-messages", "3",
                 "--property", "print.key=true", "--property", "print.offset=true",
                 "--property", "print.headers=true", "--property", "key.separator=,"])  # fmt: skip
    assert code == 0
    captured = capsysbinary.readouterr()
    assert (
        captured.out
        == b"Offset:0,origin:test,alpha,one\nOffset:1,origin:test,beta,two\nOffset:2,origin:test,gamma,three\n"
    )
    assert b"Processed a total of 3 messages" in captured.err
    code = main(["consume", *boot, "--topic", topic, "--offset", "2", "--timeout-ms", "1500"])
    assert code == 0 and capsysbinary.readouterr().out == b"three\n"
    code = main(["consume", *boot, "--topic", topic, "--group", unique_topic("g"), "--from-beginning",
                 "--max-messages", "3"])  # fmt: skip
    assert code == 0 and capsysbinary.readouterr().out == b"one\ntwo\nthree\n"


@pytest.mark.integration
def test_console_pipe_through_subprocesses(odradek_broker: BrokerProcess, tmp_path: object) -> None:
    topic = unique_topic("pipe")
    boot = ["--bootstrap-server", odradek_broker.bootstrap]
    lines = "".join(f"line {i}\n" for i in range(500))
    produced = subprocess.run([sys.executable, "-m", "odradek", "produce", *boot, "--topic", topic],
                              input=lines, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert produced.returncode == 0, produced.stderr
    consumed = subprocess.run([sys.executable, "-m", "odradek", "consume", *boot, "--topic", topic,
                               "--from-beginning", "--max-messages", "500"],
                              capture_output=True, text=True, timeout=60)  # fmt: skip
    assert consumed.returncode == 0, consumed.stderr
    assert consumed.stdout == lines


def test_produce_from_a_missing_file_is_a_clear_error(tmp_path: object) -> None:
    """It printed a FileNotFoundError traceback."""
    result = subprocess.run(
        [sys.executable, "-m", "odradek", "produce", "--bootstrap-server", "127.0.0.1:1", "--topic", "t",
         "--file", "/nonexistent/lines.txt"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 1
    assert result.stderr.strip() == "Error: cannot read --file /nonexistent/lines.txt: No such file or directory"


@pytest.mark.integration
def test_consume_from_a_partition_the_topic_lacks_fails(
    odradek_broker: BrokerProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    """It read "0 messages" and exited 0 for a partition that does not exist."""
    topic = unique_topic("twoparts")
    boot = ["--bootstrap-server", odradek_broker.bootstrap]
    assert main(["topics", "create", *boot, "--topic", topic, "--partitions", "2"]) == 0
    capsys.readouterr()
    code = main(["consume", *boot, "--topic", topic, "--partition", "9", "--from-beginning", "--timeout-ms", "500"])
    assert code != 0
    assert f"topic '{topic}' has 2 partitions (0-1): no partition 9" in capsys.readouterr().err
    assert (
        main(["consume", *boot, "--topic", topic, "--partition", "1", "--from-beginning", "--timeout-ms", "200"]) == 0
    )
