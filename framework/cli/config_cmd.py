"""``odradek config show``: the effective broker config and where each value came from."""

from __future__ import annotations

import argparse
import json

from rich.console import Console
from rich.table import Table

from ..config import load_config
from ..manager import load_plugins
from . import add_config_arguments, parse_sets


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("config", help="inspect the broker config")
    csub = p.add_subparsers(dest="config_command", metavar="SUBCOMMAND", required=True)
    show = csub.add_parser("show", help="print the effective config (defaults, file, env, --set)")
    add_config_arguments(show)
    show.add_argument("--json", action="store_true", help="print JSON")
    show.add_argument("--changed", action="store_true", help="only keys not at their default")
    show.set_defaults(func=run_show)


def run_show(args: argparse.Namespace) -> int:
    config = load_config(args.config, overrides=parse_sets(args.set), plugins=load_plugins())
    names = [n for n in sorted(config) if not args.changed or config.source(n) != "default"]
    if args.json:
        print(json.dumps({n: config[n] for n in names}, indent=2))
        return 0
    table = Table(title="odradek config")
    table.add_column("key")
    table.add_column("value")
    table.add_column("source")
    for n in names:
        v = config[n]
        table.add_row(n, ",".join(map(str, v)) if isinstance(v, list) else str(v), config.source(n))
    Console(width=160).print(table)
    return 0
