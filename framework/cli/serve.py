"""``odradek serve``: run one broker until Ctrl-C or SIGTERM.

Loads the plugins the config selects (its `plugins` and `plugins.disabled`, read first), then the
whole config (defaults: a PLAINTEXT listener on 127.0.0.1:9092 and data
under ./data), assembles the broker (:class:`odradek.broker.server.BrokerServer`) and logs where
it listens and where its data is. The first SIGINT/SIGTERM shuts it down cleanly (listeners stop
accepting, in-flight requests are answered, logs are flushed and closed); a second Ctrl-C
during that shutdown aborts it.

The ``listening on`` lines name the bound ports, so ``listeners = PLAINTEXT://127.0.0.1:0``
works: test fixtures read the port from them.
"""

from __future__ import annotations

import argparse
import logging
import resource
import signal
import sys
from typing import cast

import trio
from pythonjsonlogger.json import JsonFormatter

from ..config import Config, ConfigError, load_config
from ..errors import OdradekError
from ..manager import PluginError, configured_plugins
from . import add_config_arguments, parse_sets

log = logging.getLogger("odradek.serve")

#: The line fixtures and scripts wait for, one per bound endpoint.
LISTENING = "listening on"


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "serve",
        help="run a broker (default: PLAINTEXT://127.0.0.1:9092, data in ./data)",
        description="Run an odradek broker until Ctrl-C or SIGTERM.",
    )
    add_config_arguments(p)
    p.set_defaults(func=run)


def _setup_logging(config: Config) -> None:
    """stderr at ``log.level``, as text or, with ``log.format = json``, one JSON object a line
    (``time`` in ISO 8601 UTC, ``level``, ``logger``, ``message``, and ``exc_info`` with the
    traceback when there is one), which log shippers read without a parsing rule."""
    handler = logging.StreamHandler(sys.stderr)
    if config["log.format"] == "json":
        handler.setFormatter(
            JsonFormatter(
                "{levelname}{name}{message}",
                style="{",
                timestamp="time",
                rename_fields={"levelname": "level", "name": "logger"},
            )
        )
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=getattr(logging, str(config["log.level"]), logging.INFO), handlers=[handler], force=True)


def run(args: argparse.Namespace) -> int:
    # kio imports hypothesis when it is installed (test and bench venvs) to register strategies;
    # the broker never needs them, and loading them costs ~15 MB of RSS and a second of CPU on
    # the first requests (kio builds hypothesis charmaps as it loads schemas lazily)
    sys.modules.setdefault("hypothesis", None)  # type: ignore[arg-type]
    limits = raise_open_file_limit()
    sets = parse_sets(args.set)
    plugins = configured_plugins(args.config, overrides=sets)  # the config's plugins and plugins.disabled
    config = load_config(args.config, overrides=sets, plugins=plugins)
    _setup_logging(config)
    if limits[0] != limits[1]:
        log.info("open-file limit raised from %d to %d", *limits)
    state = {"started": False}
    failed: BaseException | None = None
    config_error: OdradekError | None = None
    try:
        trio.run(serve, config, state)
    except* (ConfigError, PluginError) as group:  # a value only a plugin can check, a missing plugin
        config_error = cast(OdradekError, _first_leaf(group))
    except* (OSError, OdradekError) as group:  # a port taken, no ZooKeeper answering, a bad log dir
        failed = _first_leaf(group)
    if config_error is not None:
        raise config_error  # reported like any other bad config: "odradek: error: ..."
    if failed is not None:
        log.error("broker %s: %s", "failed" if state["started"] else "failed to start", failed)
        return 1
    return 0


def raise_open_file_limit() -> tuple[int, int]:
    """Raise the soft limit on open files to the hard limit; returns (before, after).

    A broker holds a descriptor per connection and, for its partitions' segments and index maps,
    up to a budget derived from this limit (``storage.segment.max.open.files``); the common soft
    default of 1,024 would have a few hundred partitions reopening files on every append. Kafka's
    operations guide asks for a high ``ulimit -n``; like Go's runtime, the broker takes what the
    hard limit allows by itself (an unlimited hard limit is capped at 1,048,576).
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else 1 << 20
    if soft == resource.RLIM_INFINITY or soft >= target:
        return soft, soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError):  # e.g. a hard limit above the kernel's nr_open
        return soft, soft
    return soft, target


def _first_leaf(exc: BaseException) -> BaseException:
    """The first non-group exception inside (nested) exception groups."""
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    return exc


async def serve(config: Config, state: dict[str, bool] | None = None) -> None:
    """Run the broker for ``config`` until SIGINT or SIGTERM, then shut it down.

    ``state["started"]`` becomes True once the broker listens (for the exit message)."""
    from ..broker.server import BrokerServer  # the broker pulls in storage and metadata plugins

    server = BrokerServer(config)
    async with trio.open_nursery() as nursery:
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            endpoints = await nursery.start(server.serve)
            if state is not None:
                state["started"] = True
            for ep in endpoints:
                log.info("%s %s://%s:%d (broker %d)", LISTENING, ep.name, ep.host, ep.port, config.broker_id)
            for directory in config.log_dirs:
                log.info("data in %s", directory.resolve())
            async for signum in signals:
                log.info("%s received: shutting down", signal.Signals(signum).name)
                break
        # the receiver is closed: a second Ctrl-C now interrupts the shutdown itself
        nursery.cancel_scope.cancel()
    log.info("broker %d stopped", config.broker_id)


__all__ = ["LISTENING", "raise_open_file_limit", "register", "run", "serve"]
