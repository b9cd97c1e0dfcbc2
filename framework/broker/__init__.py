"""The broker core: protocol-agnostic request handling that transport plugins call.

:mod:`odradek.broker.api` is the facade (``Broker`` and its request/result dataclasses); the other
modules each own one job (partition state, append/read paths, purgatory, producer state, topic
metadata, the server that assembles a broker from config). See docs/architecture.md.
"""
