"""Arguments shared by the admin commands (``odradek topics``, ``odradek groups``): where the
cluster is, how long a call may take and, for commands that take them, extra client properties."""

from __future__ import annotations

import argparse

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
