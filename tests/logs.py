"""What a failed test that ran worker processes leaves in its report: the end of each log
(``from tests.logs import print_log_tails``), printed at teardown, since the home that holds
the logs goes with the test."""

from __future__ import annotations

from pathlib import Path

import pytest


def print_log_tails(request: pytest.FixtureRequest, folder: Path, lines: int) -> None:
    """If the test of ``request`` failed, print the last ``lines`` lines of each log in
    ``folder``."""
    failed = getattr(request.node, "rep_call", None)
    if failed is None or not failed.failed:
        return
    for log in sorted(folder.glob("*.log")):
        text = log.read_text(errors="replace").splitlines()
        print(f"--- the last {min(len(text), lines)} lines of {log.name} ---")
        print("\n".join(text[-lines:]))
