"""``odradek plugins``: which plugins are loaded, what roles they fill, where they came from."""

from __future__ import annotations

import argparse
import dataclasses
import json

from rich.console import Console
from rich.table import Table

from ..manager import load_plugins


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("plugins", help="list loaded plugins, their roles, versions and distributions")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    infos = load_plugins().describe()
    if args.json:
        print(json.dumps([dataclasses.asdict(info) for info in infos], indent=2))
        return 0
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
    return 0
