"""A hop's input checkpoint read while its delivery is checked and claimed.

A hop that lands on another worker than the one before it reads that hop's
checkpoint from the store: about 11 MB for a 1M-parameter model with its AdamW
state, 3 to 19 ms on a 2-core host, and before that, where the checkpoint is
still being written behind its hand-on, the wait for it. The delivery's checks
of its message and its claim (two transactions of the study database) come
first and need none of it, so the read starts on a thread of its own as soon
as the message is parsed (``CheckpointPrefetch.start``) and the hop takes the
bytes once it is claimed (``take``), decoding them on its own thread, onto its
device, as a read after the claim would.

The read ahead decides nothing: it waits for the checkpoint only a short while
(``PREFETCH_WAIT_SECONDS``, polling a local store every millisecond), and
whatever it cannot give (a checkpoint still missing, a damaged one, a message
that named another hop) the hop reads after its claim as before, with the
writer's liveness and the set-aside of a damaged file. Its bytes are checked
against the checksum, so a hop never trains from a torn read; a checkpoint is
written once under its key (atomically), and a hop run again writes the same
bytes, so bytes read ahead are the bytes a later read would find.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from hoptune.core import Store
from hoptune.tasks.worker._checkpoint import WRITER_POLL_SECONDS, read_checkpoint

__all__ = ["PREFETCH_WAIT_SECONDS", "CheckpointPrefetch"]

log = logging.getLogger(__name__)

#: How long a read ahead waits for a checkpoint not stored yet: as long as a reader waits
#: before it first asks whether the writer still writes (the hop's own read decides after).
PREFETCH_WAIT_SECONDS = WRITER_POLL_SECONDS


class CheckpointPrefetch:
    """One checkpoint read ahead at a time, per process, on a thread of its own."""

    def __init__(self) -> None:
        self._pool: ThreadPoolExecutor | None = None
        self._pid = 0  # the process that started the thread: a forked child starts its own
        self._lock = threading.Lock()
        self._ahead: tuple[str, Future[Any]] | None = None
        self._size = 0  # the last checkpoint's: the next of a trial is as large
        self.hits = self.misses = 0

    def start(self, store: Store, key: str, wait: float = PREFETCH_WAIT_SECONDS) -> None:
        """Begin reading the checkpoint under ``key``, waiting up to ``wait`` seconds for it to
        be stored; a read ahead not taken yet is dropped."""
        with self._lock:
            if self._pool is None or self._pid != os.getpid():
                self._pool = ThreadPoolExecutor(1, thread_name_prefix="hoptune-read-ahead")
                self._pid = os.getpid()
            # its buffer from this thread's heap, where the hop's freed ones are kept
            # (``keep_freed_memory``): with each buffer taken on the reading thread, the read
            # ahead took longer than the read it overlapped (a ~1 s hop on a 2-core host:
            # its load 10.6 ms before, 25.5 ms so, 6.2 ms with this)
            spare = _empty(self._size) if self._size else None
            self._ahead = (key, self._pool.submit(_read, store, key, wait, spare))

    def take(self, key: str) -> Any | None:
        """The checked bytes of ``key``'s checkpoint read ahead (``read_checkpoint``'s), once
        the read is done; None where none was started for ``key`` or it could not read them
        (the caller reads them itself)."""
        with self._lock:
            ahead, self._ahead = self._ahead, None
        if ahead is None or ahead[0] != key:
            return None
        data = ahead[1].result()
        if data is None:
            self.misses += 1
        else:
            self.hits += 1
            self._size = len(data)
        return data

    def drop(self) -> None:
        """Let go of a read ahead that no hop will take (its delivery trains nothing)."""
        with self._lock:
            self._ahead = None


def _read(store: Store, key: str, wait: float, spare: Any | None) -> Any | None:
    """``read_checkpoint`` of ``key`` once it exists (within ``wait`` seconds); None if it did
    not appear or could not be read whole."""
    deadline = time.monotonic() + wait
    pause = 0.001
    try:
        while not store.exists(key):
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            time.sleep(min(pause, left))
            if not store.local:  # a request each time: poll a remote store ever less often
                pause = min(pause * 2, 0.1)
        return read_checkpoint(store, key, lambda n: spare[:n] if spare is not None
                               and len(spare) >= n else _empty(n))
    except Exception as exc:  # noqa: BLE001 - the hop's own read after its claim decides
        log.debug("checkpoint %s: not read ahead (%s)", key, exc)
        return None



def _empty(size: int) -> Any:
    import numpy as np

    return np.empty(size, dtype=np.uint8)
