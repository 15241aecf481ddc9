"""bench/_report.py: every benchmark's section of BENCHMARKS.md, and the machine line."""

from __future__ import annotations

from pathlib import Path

from bench._report import machine, write_section


def test_write_section_creates_replaces_and_leaves_the_rest(tmp_path: Path) -> None:
    path = tmp_path / "BENCHMARKS.md"
    write_section("mine", "first", path)
    block = "<!-- bench:mine -->\nfirst\n<!-- /bench:mine -->"
    assert path.read_text() == f"# Benchmarks\n\n{block}\n"

    other = "<!-- bench:other -->\nkeep me\n<!-- /bench:other -->"
    path.write_text(f"# Benchmarks\n\n{other}\n\n{block}\n\n{other.replace('me', 'me too')}\n")
    write_section("mine", "\nsecond\n", path)
    assert path.read_text() == (
        f"# Benchmarks\n\n{other}\n\n<!-- bench:mine -->\nsecond\n<!-- /bench:mine -->\n\n"
        f"{other.replace('me', 'me too')}\n"
    )


def test_machine_names_cores_and_torch() -> None:
    import os

    import torch

    line = machine()
    assert f"{os.cpu_count()} cores" in line and torch.__version__ in line
