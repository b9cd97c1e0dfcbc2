"""What every conformance suite's one-line ``check_*`` helper shares."""

from __future__ import annotations

import sys
from typing import Any, TypeVar

S = TypeVar("S", bound=type)


def suite_for(base: S, name: str, attributes: dict[str, Any], *, depth: int = 2) -> S:
    """A subclass of ``base`` with ``attributes``, belonging to the module that called the
    ``check_*`` helper ``depth - 1`` frames up: pytest collects it there, under the ``Test*`` name
    it is assigned to, and reports failures against that module."""
    caller = sys._getframe(depth).f_globals.get("__name__", __name__)
    cls: S = type(name, (base,), attributes)  # type: ignore[assignment]
    cls.__module__ = caller
    return cls
