"""odradek built-in plugin: transport_tcp."""
