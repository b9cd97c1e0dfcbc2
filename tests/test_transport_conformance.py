"""The built-in tcp transport (plugins/transport_tcp) against the transport conformance suite."""

from __future__ import annotations

from odradek.plugins.transport_tcp.plugin import odradek_register_transports
from odradek.testing import check_transport

TCP = next(t for t in odradek_register_transports() if t.name == "tcp")

TestTcpTransportConformance = check_transport(TCP)
