"""Serves a broker's metrics to Prometheus over HTTP: ``metrics.prometheus.listener``.

prometheus-client's own HTTP server answers ``GET /metrics`` in threads of its own, so a scrape
never waits for the broker's event loop to serve HTTP. What it exposes is built on the broker's
trio thread (``trio.from_thread.run_sync``): the counters and state are only ever touched by the
thread that changes them, and a scrape sees them at one instant. Next to the broker's metrics
(:mod:`odradek.metrics`) it serves prometheus-client's process metrics (``process_*``: CPU,
resident memory, open file descriptors) and the Python platform's.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import trio
from prometheus_client import CollectorRegistry, PlatformCollector, ProcessCollector, start_http_server
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from .metrics import BrokerCollector

if TYPE_CHECKING:
    from .broker.core import BrokerCore

log = logging.getLogger(__name__)


class _OnBrokerThread(Collector):
    """A :class:`BrokerCollector` for the HTTP server's thread: the snapshot is taken on the
    broker's trio thread, the metric families are built here."""

    def __init__(self, collector: BrokerCollector, token: trio.lowlevel.TrioToken) -> None:
        self.collector = collector
        self.token = token

    def collect(self) -> list[Metric]:
        try:
            snapshot = trio.from_thread.run_sync(self.collector.snapshot, trio_token=self.token)
        except trio.RunFinishedError:  # a scrape racing the broker's exit
            return []
        return self.collector.families(snapshot)  # here, off the broker's thread


def registry_for(core: BrokerCore, token: trio.lowlevel.TrioToken) -> CollectorRegistry:
    """A registry with the broker's metrics (built on the thread of ``token``) and the process's."""
    registry = CollectorRegistry(auto_describe=False)
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    registry.register(_OnBrokerThread(BrokerCollector(core), token))
    return registry


async def serve_metrics(core: BrokerCore, host: str, port: int, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
    """Serve ``http://host:port/metrics`` until cancelled; reports the bound ``(host, port)``
    once it listens (port 0: the port the system picked). A port in use raises ``OSError``."""
    registry = registry_for(core, trio.lowlevel.current_trio_token())
    server, thread = start_http_server(port, addr=host, registry=registry)
    try:
        bound = (host, int(server.server_port))
        log.info("metrics for Prometheus at http://%s/metrics", _netloc(*bound))
        task_status.started(bound)
        await trio.sleep_forever()
    finally:
        with trio.CancelScope(shield=True):
            # shutdown() waits for the serving loop to notice (up to half a second): off the loop
            await trio.to_thread.run_sync(server.shutdown)
            server.server_close()
            await trio.to_thread.run_sync(thread.join)


def _netloc(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


__all__ = ["registry_for", "serve_metrics"]
