"""odradek built-in plugin: transport_tcp -- Kafka's wire protocol over TCP.

:mod:`.plugin` registers the transport; :mod:`.server` and :mod:`.connection` serve clients
(framing in :mod:`.framing`, request handlers in :mod:`.apis`); :mod:`.client` is the client
side for odradek's own client.
"""
