"""A training process keeps the memory it frees for its next hop, instead of faulting it in anew.

Every hop allocates buffers the size of its checkpoint (the bytes it encodes,
the bytes its successor reads) and frees them a hop later. glibc's malloc
serves an allocation that large with a fresh mapping and returns it to the
system when freed, so the next hop's buffer is faulted in page by page: about
2,900 page faults and 5 ms for the ~11 MB checkpoint of a 1M-parameter model
with its AdamW state, on a 2-core virtual machine. ``keep_freed_memory`` raises
the size up to which malloc serves from its heap (to glibc's largest, 32 MiB
on 64-bit systems) and the free space it keeps at the heap's top, so a freed
buffer serves the next one. The cost is memory: a worker holds on to what it
freed, up to the heap's high-water mark. An operator's own ``MALLOC_MMAP_THRESHOLD_``
or ``MALLOC_TRIM_THRESHOLD_`` is left as it is; other C libraries are left alone.
"""

from __future__ import annotations

import ctypes
import os
import sys

__all__ = ["keep_freed_memory"]

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # mallopt's parameters (malloc.h)
_HEAP_LARGEST = 32 << 20  # glibc's largest mmap threshold on 64-bit systems
_KEPT_AT_TOP = 4 * _HEAP_LARGEST


def keep_freed_memory() -> bool:
    """Make this process's malloc keep freed buffers up to 32 MiB for reuse; True if it did
    (glibc, with neither threshold set by the environment)."""
    if not sys.platform.startswith("linux") or any(
            name in os.environ for name in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # a C library without mallopt
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, _HEAP_LARGEST)) and bool(
        mallopt(_M_TRIM_THRESHOLD, _KEPT_AT_TOP))
