"""The built-in assignors (odradek.default_assignors) against the assignor conformance suite."""

from __future__ import annotations

from odradek.assignors import CooperativeStickyAssignor, RangeAssignor, RoundRobinAssignor, StickyAssignor
from odradek.default_assignors import odradek_register_assignors
from odradek.testing import check_assignor

TestRangeConformance = check_assignor(RangeAssignor)
TestRoundRobinConformance = check_assignor(RoundRobinAssignor)
TestStickyConformance = check_assignor(StickyAssignor)
TestCooperativeStickyConformance = check_assignor(CooperativeStickyAssignor)


def test_every_registered_assignor_is_checked() -> None:
    checked = {RangeAssignor, RoundRobinAssignor, StickyAssignor, CooperativeStickyAssignor}
    assert set(odradek_register_assignors()) == checked
