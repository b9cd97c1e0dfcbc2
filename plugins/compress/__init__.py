"""odradek built-in plugin: compress."""
