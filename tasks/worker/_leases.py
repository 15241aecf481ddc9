"""Leases a process holds while it lives: a file it keeps locked, freed when it ends.

The lock (``flock``) belongs to the open file, so the operating system frees it
when its process exits, killed or not: a lease nobody holds any longer is the
trace of a process gone, never of one still running. The hoptune commands on
one home take leases on the embedded Redis they share (the last to leave stops
it) and on their local workers' names (two commands never start workers of the
same name).
"""

from __future__ import annotations

import fcntl
from pathlib import Path
from typing import IO

__all__ = ["held", "take_lease"]


def take_lease(path: Path) -> IO[bytes] | None:
    """Hold ``path`` for this process until the returned file is closed (or the process
    ends); None where another holds it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lease = open(path, "ab")  # noqa: SIM115 - the lease lasts as long as the file is open
    try:
        fcntl.flock(lease, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lease.close()
        return None
    return lease


def held(path: Path) -> bool:
    """Whether another open file holds ``path``'s lease; a lease nobody holds is removed."""
    try:
        with open(path, "rb") as other:
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except FileNotFoundError:
        return False  # its holder left meanwhile
    path.unlink(missing_ok=True)
    return False
