"""odradek built-in plugin: meta_etcd."""
