"""Shared by the benchmarks: the machine they ran on, and their section of BENCHMARKS.md."""

from __future__ import annotations

import os
import platform
import re
import sys
from pathlib import Path

__all__ = ["cpu_model", "machine", "write_section", "command", "load_average", "BENCHMARKS"]

BENCHMARKS = Path(__file__).resolve().parent.parent / "BENCHMARKS.md"


def cpu_model() -> str:
    """The CPU's model name, from /proc/cpuinfo where there is one."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def machine() -> str:
    """One line: CPU model, cores, memory, Python and torch versions."""
    cpu = cpu_model()
    memory = ""
    try:
        kib = int(Path("/proc/meminfo").read_text().split()[1])
        memory = f", {kib / 2**20:.0f} GiB"
    except (OSError, ValueError, IndexError):
        pass
    import torch

    return (f"{cpu}, {os.cpu_count()} cores{memory}, Python {platform.python_version()}, "
            f"torch {torch.__version__}")


def write_section(name: str, body: str, path: Path = BENCHMARKS) -> None:
    """Replace the block of ``name`` in BENCHMARKS.md (between its markers), or append it."""
    start, end = f"<!-- bench:{name} -->", f"<!-- /bench:{name} -->"
    block = f"{start}\n{body.strip()}\n{end}"
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    pattern = re.compile(re.escape(start) + r".*?" + re.escape(end), re.S)
    text = pattern.sub(lambda _: block, text) if pattern.search(text) else (
        text.rstrip() + "\n\n" + block + "\n")
    path.write_text(text)


def command() -> str:
    """The bench's command line as a shell would take it (an empty argument as '')."""
    import shlex

    return "python " + shlex.join([os.path.relpath(sys.argv[0])] + sys.argv[1:])


def load_average() -> str:
    """The machine's load average over 1, 5 and 15 minutes, as ``uptime`` shows it."""
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
