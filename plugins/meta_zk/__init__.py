"""odradek built-in plugin: meta_zk."""
