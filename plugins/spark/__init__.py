"""odradek built-in plugin: spark."""
