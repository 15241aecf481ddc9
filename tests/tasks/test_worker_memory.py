"""A training process keeps the memory it frees for its next hop's buffers (glibc's malloc)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

# a hop's pattern: a checkpoint encoded and freed, one read (of a size of its own) kept for
# two hops, page faults counted per hop after the first few
_HOPS = """
import resource, sys
import numpy as np
from hoptune.tasks.worker import keep_freed_memory
kept = keep_freed_memory() if sys.argv[1] == "keep" else None
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
held, size = [], 11 << 20
for hop in range(24):
    if hop == 4:
        start = faults()
    encoded = np.empty(size, np.uint8)
    encoded.fill(1)
    read = np.empty(size + 4096 * hop, np.uint8)
    read.fill(1)
    held = [*held[-1:], read]
    del encoded
print(kept, (faults() - start) // 20, size // 4096)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_a_worker_reuses_freed_checkpoint_buffers_instead_of_faulting_them_in() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    out = {}
    for how in ("keep", "default"):
        done = subprocess.run([sys.executable, "-c", _HOPS, how], env=env, check=True,
                              capture_output=True, text=True)
        kept, faults, pages = done.stdout.split()
        out[how] = (kept, int(faults))
    assert out["keep"][0] == "True" and out["default"][0] == "None"
    assert out["keep"][1] < int(pages) // 8, out  # far from a buffer's pages per hop
    assert out["keep"][1] * 2 < out["default"][1], out


def test_an_operators_own_malloc_settings_are_left_alone() -> None:
    env = {**os.environ, "MALLOC_TRIM_THRESHOLD_": "131072"}
    done = subprocess.run([sys.executable, "-c", "from hoptune.tasks.worker import "
                           "keep_freed_memory; print(keep_freed_memory())"], env=env,
                          check=True, capture_output=True, text=True)
    assert done.stdout.strip() == "False"
