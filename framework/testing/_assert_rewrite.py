"""Marks odradek.testing's modules for pytest's assertion rewriting; imported first by the package.

``pytest.register_assert_rewrite`` only affects modules imported after the call, so this module
imports none of them. Rewritten, a failing conformance check shows the values it compared
(``assert [11, 12, 13] == [1, 2, 3]``) instead of a bare ``AssertionError``.
"""

from __future__ import annotations

import pytest

_PACKAGE = __name__.rpartition(".")[0]

#: Every module of odradek.testing that asserts on a plugin's behaviour (suites and their helpers).
REWRITTEN_MODULES: tuple[str, ...] = tuple(
    f"{_PACKAGE}.{name}"
    for name in (
        "assignor",
        "authorizer",
        "broker",
        "codec",
        "metadata",
        "partitioner",
        "remote_storage",
        "replica_selector",
        "sasl",
        "server_assignor",
        "servers",
        "spark",
        "storage",
        "storage_support",
        "transport",
    )
)
pytest.register_assert_rewrite(*REWRITTEN_MODULES)
