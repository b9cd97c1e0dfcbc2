"""odradek.testing as a third party meets it: the suites run from a project of its own, with no
pytest config (no ``trio_mode``), and a failing check shows the values it compared.

Each test writes a test module into pytester's temp directory and runs pytest on it in a
subprocess, outside this repository: only the installed ``pytest11`` entry point loads the plugin.
"""

from __future__ import annotations

import textwrap

import pytest

pytest_plugins = ["pytester"]

META_LOCAL = """
    import pytest

    from odradek.plugins.meta_local.store import FILE_NAME, LocalMetadataStore
    from odradek.testing import MetadataStoreConformance

    class CountsFromEleven(LocalMetadataStore):
        async def next_id(self, key):
            return await super().next_id(key) + {offset}

    class TestStore(MetadataStoreConformance):
        @pytest.fixture
        def metadata_store_factory(self, tmp_path):
            return lambda: CountsFromEleven(tmp_path / FILE_NAME)
"""


def run_outside(pytester: pytest.Pytester, source: str, *args: str) -> pytest.RunResult:
    """pytest on ``source`` in a fresh directory with no config file, in a new process."""
    pytester.makepyfile(test_plugin_suite=textwrap.dedent(source))
    assert not list(pytester.path.glob("*.ini")) and not list(pytester.path.glob("*.toml"))
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", *args)


def test_the_metadata_suite_runs_without_trio_mode(pytester: pytest.Pytester) -> None:
    result = run_outside(pytester, META_LOCAL.format(offset=0))
    result.assert_outcomes(passed=28)


def test_a_failing_suite_check_shows_the_values(pytester: pytest.Pytester) -> None:
    result = run_outside(pytester, META_LOCAL.format(offset=10), "-k", "next_id_counts_from_one")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*AssertionError: assert [[]11, 12, 13[]] == [[]1, 2, 3[]]*"])
