"""The ``odradek`` command line.

Each sub-command lives in its own module with a ``register(subparsers)`` function that adds its
parser and sets ``func`` (returning the exit code). ``COMMANDS`` lists the modules in help order.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from .. import __version__
from ..config import ConfigError
from ..errors import OdradekError

COMMANDS: tuple[str, ...] = (
    "odradek.cli.serve",
    "odradek.cli.plugins_cmd",
    "odradek.cli.config_cmd",
    "odradek.cli.perf",
    "odradek.cli.groups",
    "odradek.cli.topics",
    "odradek.cli.users",
    "odradek.cli.partitions",
    "odradek.cli.log_dirs",
    "odradek.cli.quotas",
    "odradek.cli.acls",
    "odradek.cli.produce",
    "odradek.cli.consume",
)


class SubcommandParser(argparse.ArgumentParser):
    """A subcommand's parser that reports arguments it does not know itself, with its own
    usage: argparse leaves them to the top-level parser, whose ``usage: odradek [-h] COMMAND``
    says nothing about what ``odradek groups delete`` takes."""

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        parsed, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed, extras


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="odradek",
        description="odradek: a Kafka-compatible distributed commit log (broker, client tools, perf).",
    )
    parser.add_argument("--version", action="version", version=f"odradek {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=SubcommandParser)
    for module_name in COMMANDS:
        importlib.import_module(module_name).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "func", None) is None:
        parser.print_help()
        return 2
    try:
        code: int = args.func(args)
    except (ConfigError, OdradekError) as exc:
        print(f"odradek: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return code


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    """``--config FILE`` and ``--set key=value`` for commands that load the broker config."""
    parser.add_argument("--config", metavar="FILE", help="TOML config file")
    parser.add_argument(
        "--set",
        metavar="KEY=VALUE",
        action="append",
        default=[],
        help="override one config key (Kafka property name); repeatable",
    )


def parse_sets(items: Sequence[str]) -> list[tuple[str, str]]:
    out = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set expects KEY=VALUE, got {item!r}")
        out.append((key.strip(), value))
    return out
