"""Namespace for odradek's built-in plugins (installed from ``plugins/<name>/`` in the source tree)."""
