"""README's test command runs the suite with ``--dist loadgroup``: the tests of an xdist group
(fault scenarios, modules that build one costly fixture) run on one test process. That holds
only while pytest-xdist can mark them, which it does by renaming their node ids."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.xdist_group("grouping")


def test_a_test_of_a_group_is_sent_as_one_of_its_group(request: pytest.FixtureRequest) -> None:
    if not request.config.getvalue("loadgroup"):
        pytest.skip("not run with --dist loadgroup (README's test command)")
    assert request.node.nodeid.endswith("@grouping"), (
        f"{request.node.nodeid}: pytest-xdist did not mark this test's group, so "
        "--dist loadgroup spreads its tests over the workers (pytest and pytest-xdist "
        "versions that do not work together?)")
