"""An in-memory odradek storage engine: the example of a third-party storage plugin."""

from .engine import MemoryLog, MemoryLogStorage

__all__ = ["MemoryLog", "MemoryLogStorage"]
