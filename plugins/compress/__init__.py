"""odradek built-in plugin: compress -- Kafka's batch codecs gzip (1), snappy (2), lz4 (3), zstd (4).

Each codec lives in its own module and is registered by :mod:`.plugin` through the compression
hook, the same way a third-party codec plugin registers a new id.
"""
