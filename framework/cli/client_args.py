"""Arguments shared by the admin commands (``odradek topics``, ``odradek groups``): where the
cluster is, how long a call may take and, for commands that take them, extra client properties."""

from __future__ import annotations

import argparse
from typing import Any

DEFAULT_TIMEOUT_S = 30.0


def add_admin_arguments(parser: argparse.ArgumentParser, *, command_config: bool = False) -> None:
    """``--bootstrap-server`` and ``--timeout``; with ``command_config``, ``--command-config KEY=VALUE``."""
    parser.add_argument(
        "--bootstrap-server", required=True, metavar="HOST:PORT", help="broker(s) to connect to, comma separated"
    )
    if command_config:
        parser.add_argument(
            "--command-config",
            metavar="KEY=VALUE",
            action="append",
            default=[],
            help="admin client property (repeatable)",
        )
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="seconds (default 30)")


def admin_client(args: argparse.Namespace, client_id: str) -> Any:
    """odradek's ``Admin`` for a command's ``--bootstrap-server`` and ``--command-config``
    (the client is imported here, not at the top, so ``odradek --help`` stays quick)."""
    from ..client import Admin
    from .topics import parse_key_values

    config = {"bootstrap.servers": args.bootstrap_server, "client.id": client_id}
    config.update(parse_key_values(args.command_config, "--command-config"))
    return Admin(config)
