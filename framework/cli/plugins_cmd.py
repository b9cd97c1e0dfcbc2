"""``odradek plugins``: which plugins are loaded, what roles they fill, where they came from.

With ``--config``/``--set`` it loads what that broker config selects (``plugins``,
``plugins.disabled``). Anything that would make a broker or a client fail to select a plugin -- a
hook that raises or returns the wrong thing, a name or codec id offered twice, a security
protocol served by several transports none of them built in -- is listed after the table as an
``odradek: error:`` line and the command exits 1, so it can gate an installation.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys

from rich.console import Console
from rich.table import Table

from ..manager import configured_plugins
from . import add_config_arguments, parse_sets


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("plugins", help="list loaded plugins, their roles, versions and distributions")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    add_config_arguments(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    plugins = configured_plugins(args.config, overrides=parse_sets(args.set))
    infos = plugins.describe()
    problems = [p for info in infos for p in info.problems] + plugins.conflicts()
    if args.json:
        print(json.dumps([dataclasses.asdict(info) for info in infos], indent=2))
    else:
        table = Table(title="odradek plugins")
        for col in ("plugin", "roles", "offers", "distribution", "version", "module"):
            table.add_column(col)
        for info in infos:
            table.add_row(
                info.name,
                ", ".join(info.roles),
                ", ".join(o.split(":", 1)[1] for o in info.offers),
                info.distribution,
                info.version,
                info.module,
            )
        Console(width=160).print(table)
    for problem in problems:
        print(f"odradek: error: {problem}", file=sys.stderr)
    return 1 if problems else 0
