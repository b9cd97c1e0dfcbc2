"""odradek built-in plugin: meta_local."""
