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
    result.assert_outcomes(passed=32)  # with leader_changes


def test_a_failing_suite_check_shows_the_values(pytester: pytest.Pytester) -> None:
    result = run_outside(pytester, META_LOCAL.format(offset=10), "-k", "next_id_counts_from_one")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*AssertionError: assert [[]11, 12, 13[]] == [[]1, 2, 3[]]*"])


# -- a deliberately broken plugin per role: its suite fails, naming what is wrong ---------------

BROKEN = {
    "codec": (
        """
        import zlib

        from odradek.testing import check_codec

        class LeakyGzip:
            '''Writes zlib streams, not gzip members, and ignores corrupt input.'''

            id = 1
            name = "gzip"

            def compress(self, data, level=None):
                return zlib.compress(data)

            def decompress(self, data):
                try:
                    return zlib.decompress(data)
                except zlib.error:
                    return b""

        TestLeakyGzip = check_codec(LeakyGzip())
        """,
        [
            "*Failed: gzip output is not Kafka's framing for id 1: BadGzipFile*",
            "*Failed: gzip: decompress of garbage input returned 0 bytes instead of raising*",
            "FAILED *::TestLeakyGzip::test_writes_kafka_framing*",
            "FAILED *::TestLeakyGzip::test_corrupt_input_raises*",
        ],
    ),
    "partitioner": (
        """
        import random

        from odradek.testing import check_partitioner

        class OffByOne:
            name = "off-by-one"

            def partition(self, topic, key, value, num_partitions):
                return hash(key) % num_partitions + (1 if key else 0)

            def on_new_batch(self, topic, previous_partition, num_partitions):
                pass

        TestOffByOne = check_partitioner(OffByOne)
        """,
        [
            "*AssertionError: key b'a', 1 partitions: partition 1 is outside range(1)*",
            "FAILED *::TestOffByOne::test_results_in_range*",
        ],
    ),
    "assignor": (
        """
        from odradek.assignors import RangeAssignor
        from odradek.testing import check_assignor

        class Forgetful(RangeAssignor):
            '''Claims cooperative support but moves owned partitions directly, and skips a member.'''

            name = "forgetful"
            rebalance_protocol = "cooperative"

            def assign(self, partitions_per_topic, members):
                result = super().assign(partitions_per_topic, members)
                if len(result) > 3:
                    result.pop(sorted(result)[-1])
                return result

        TestForgetful = check_assignor(Forgetful)
        """,
        [
            "*AssertionError: orders-* moved from m* to m* in one cooperative rebalance: it must be revoked first*",
            "*AssertionError: assignment keys * are not the members *",
        ],
    ),
    "transport": (
        """
        import trio

        from odradek.interfaces import TransportFactory
        from odradek.plugins.transport_tcp.client import TcpConnector
        from odradek.plugins.transport_tcp.server import TcpListener
        from odradek.testing import check_transport

        class PortZeroListener(TcpListener):
            '''Reports the configured endpoint (port 0) instead of the bound one.'''

            async def serve(self, *, task_status=trio.TASK_STATUS_IGNORED):
                class Relay:
                    def started(self, bound):
                        task_status.started([self_.endpoint])

                self_ = self
                await super().serve(task_status=Relay())

        BROKEN = TransportFactory("broken", ("PLAINTEXT",), PortZeroListener, TcpConnector)
        TestBrokenTransport = check_transport(BROKEN)
        """,
        [
            "*AssertionError: serve reported port 0 instead of the bound port: Endpoint(*",
            "FAILED *::TestBrokenTransport::test_serve_reports_the_bound_port*",
        ],
    ),
}


@pytest.mark.parametrize("role", sorted(BROKEN))
def test_a_broken_plugin_fails_its_suite_with_a_clear_message(pytester: pytest.Pytester, role: str) -> None:
    source, expected = BROKEN[role]
    result = run_outside(pytester, source, "-rf")
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()
    result.stdout.fnmatch_lines(expected, consecutive=False)
