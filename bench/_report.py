"""Shared by the benchmarks: the machine they ran on, and their section of BENCHMARKS.md."""

from __future__ import annotations

import os
import platform
import re
import sys
from pathlib import Path

__all__ = ["machine", "write_section", "BENCHMARKS"]

BENCHMARKS = Path(__file__).resolve().parent.parent / "BENCHMARKS.md"


def machine() -> str:
    """One line: CPU model, cores, memory, Python and torch versions."""
    cpu = platform.processor() or "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory = ""
    try:
        kib = int(Path("/proc/meminfo").read_text().split()[1])
        memory = f", {kib / 2**20:.0f} GiB"
    except (OSError, ValueError, IndexError):
        pass
    import torch

    return (f"{cpu}, {os.cpu_count()} cores{memory}, Python {platform.python_version()}, "
            f"torch {torch.__version__}")


def write_section(name: str, body: str) -> None:
    """Replace the block of ``name`` in BENCHMARKS.md (between its markers), or append it."""
    start, end = f"<!-- bench:{name} -->", f"<!-- /bench:{name} -->"
    block = f"{start}\n{body.strip()}\n{end}"
    text = BENCHMARKS.read_text() if BENCHMARKS.exists() else "# Benchmarks\n"
    pattern = re.compile(re.escape(start) + r".*?" + re.escape(end), re.S)
    text = pattern.sub(lambda _: block, text) if pattern.search(text) else (
        text.rstrip() + "\n\n" + block + "\n")
    BENCHMARKS.write_text(text)


def command() -> str:
    return "python " + " ".join([os.path.relpath(sys.argv[0])] + sys.argv[1:])
