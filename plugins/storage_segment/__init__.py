"""odradek built-in plugin: storage_segment."""
