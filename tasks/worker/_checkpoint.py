"""Checkpoints: a trial's model and optimizer state after one hop.

Keyed by (study, trial, epoch, position in the visit order), so a hop knows
before it trains whether its output already exists. Laid out flat into memory
(``_flat``: a header, then each tensor's raw bytes; loaded as views of the
bytes read, no copy) and written to the store atomically. What the flat layout
does not carry (tensors sharing memory, values of other types) is written with
``torch.save`` instead, and loaded with ``weights_only=True`` (tensors and
plain containers only, never pickled code), as every checkpoint written before.

Each checkpoint ends with a checksum of the bytes before it (``HTX3`` and the
128-bit XXH3 of them; one written before carries ``HTCK`` and a SHA-256, and
still reads): a truncated or damaged file is found when it is read, and raises
``CheckpointError`` naming it, instead of a confusing error from deep inside
``torch.load``. With that checksum over every byte, ``torch.save``'s own CRC-32
of each record is left out: it cost more than the XXH3 of the whole file.

Durability: a hop's checkpoint is written without fsync. A host crash may
lose it or cut it short; the hop that reads it then finds it missing or its
checksum wrong and runs the hop before again (a rewind): the cost is one hop,
the same as a worker killed mid-hop. Only what outlives the trial is synced:
its final checkpoint (``keep_final``), which promotion and the report read.

Written behind: a hop hands its checkpoint to the process's ``CheckpointWriter``
thread (at a lower priority), which lays it out, checksums it and writes it while
the hop records itself and its successor is dispatched, or,
after an epoch's last hop, while the epoch's end validates the weights in
memory; the epoch is decided only once the write landed. Its tensors stay as
they are until then: the next hop that trains them in this process takes them
through ``LatestCheckpoints.take``, which waits for the write (a checkpoint on a
GPU is copied to host memory on the hop's own path first, on its own stream). The reader of a
checkpoint not yet there waits for it (``load_checkpoint``'s ``wait`` and ``writing``)
while its writer is alive and has not said its write failed, however long a large
checkpoint takes to reach a slow store (up to ``WRITE_WAIT_LIVENESSES`` liveness bounds,
for a write that hangs); a writer killed before its write finished, or whose write
failed, costs the hop that wrote it, which the reader rewinds, as for a lost file.

A worker keeps the latest checkpoint of each trial it trained in memory
(``LatestCheckpoints``), with the model and optimizer whose tensors it holds: the
trial's next hop, if it lands on the same worker, takes them from there after
reading only the stored file's checksum (its last bytes), so a copy that the
store no longer holds is never used, and trains on without building them again.
"""

from __future__ import annotations

import hashlib
import io
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, BinaryIO

import xxhash

from hoptune.core import CheckpointError, Store, StoreError
from hoptune.tasks.worker import _flat

if TYPE_CHECKING:
    import torch

__all__ = ["Checkpoint", "CheckpointWriter", "LatestCheckpoints", "checkpoint_key",
           "encode_checkpoint", "previous_position", "save_checkpoint", "write_encoded",
           "load_checkpoint", "stored_digest", "set_aside", "keep_final",
           "checkpoints_in_memory", "poll_pause"]

log = logging.getLogger(__name__)

_TRAILER = b"HTX3"  # then the XXH3-128 of the bytes before it
#: Each trailer a checkpoint may end with: its tag, its digest's size, and the digest's function
#: (the first is written; the SHA-256 one, by earlier releases, still reads).
_TRAILERS: tuple[tuple[bytes, int, Callable[[Any], bytes]], ...] = (
    (_TRAILER, 16, lambda body: xxhash.xxh3_128(body).digest()),
    (b"HTCK", hashlib.sha256().digest_size, lambda body: hashlib.sha256(body).digest()),
)
_TAIL = max(len(tag) + size for tag, size, _ in _TRAILERS)


def checkpoint_key(study_id: int, trial_id: int, epoch: int, position: int) -> str:
    return f"checkpoints/study-{study_id}/trial-{trial_id}/e{epoch:04d}-p{position:04d}.pt"


def previous_position(epoch: int, position: int, shards: int) -> tuple[int, int] | None:
    """The (epoch, position) whose checkpoint a hop starts from; None for the very first hop."""
    if position > 0:
        return epoch, position - 1
    if epoch > 0:
        return epoch - 1, shards - 1
    return None


@dataclass
class Checkpoint:
    """What a hop hands to the next: weights, optimizer state, and its figures.

    No RNG state: every random stream of a hop derives from (trial seed, epoch, shard).
    """

    model: dict[str, torch.Tensor]
    optimizer: dict[str, Any]
    samples: int
    loss: float


def encode_checkpoint(checkpoint: Checkpoint) -> tuple[memoryview, bytes]:
    """The checkpoint's bytes as stored (flat, or ``torch.save``'s where the flat layout does
    not carry it: ``_flat``), then the trailer, and their digest."""
    payload = {
        "model": checkpoint.model,
        "optimizer": checkpoint.optimizer,
        "samples": checkpoint.samples,
        "loss": checkpoint.loss,
    }
    room = len(_TRAILER) + 16
    try:
        data = memoryview(_flat.encode(payload, room)).cast("B")
    except _flat.NotFlat:
        return _encode_saved(payload)
    body = data[: len(data) - room]
    digest = xxhash.xxh3_128(body).digest()
    data[len(body):] = _TRAILER + digest
    return data, digest


def _encode_saved(payload: dict[str, Any]) -> tuple[memoryview, bytes]:
    """``payload`` in ``torch.save``'s format, then the trailer, and their digest."""
    import torch

    # sized up front from its tensors (and room for the rest): no regrowing copies as it fills
    buffer = io.BytesIO(bytes(_tensor_bytes(payload) + (1 << 16)))
    with _without_torch_crc():
        torch.save(payload, buffer)
    buffer.truncate()
    with buffer.getbuffer() as body:
        digest = xxhash.xxh3_128(body).digest()
    buffer.write(_TRAILER + digest)
    return buffer.getbuffer(), digest


def _tensor_bytes(value: Any) -> int:
    """How many bytes the tensors in ``value`` (nested dicts, lists and tuples) hold."""
    return sum(t.nbytes for t in _tensors(value))


def _tensors(value: Any) -> Iterator[torch.Tensor]:
    """The tensors in ``value`` (nested dicts, lists and tuples)."""
    import torch

    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _tensors(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _tensors(v)


@contextmanager
def _without_torch_crc() -> Iterator[None]:
    """``torch.save`` without its CRC-32 of each record: the trailer's XXH3 covers every byte."""
    from torch import serialization

    before = serialization.get_crc32_options()
    serialization.set_crc32_options(False)
    try:
        yield
    finally:
        serialization.set_crc32_options(before)


def save_checkpoint(store: Store, key: str, checkpoint: Checkpoint) -> bytes:
    """Write the checkpoint atomically, unsynced, now. Returns the digest its trailer carries."""
    data, digest = encode_checkpoint(checkpoint)
    write_encoded(store, key, data)
    return digest


#: The bytes of a checkpoint handed to the kernel in one write call.
WRITE_CHUNK = 1 << 20


def write_encoded(store: Store, key: str, data: memoryview) -> None:
    """Write a checkpoint's bytes (``encode_checkpoint``'s) atomically, unsynced, a
    ``WRITE_CHUNK`` at a time: a thread that wakes can take the CPU between two calls, where
    one call copying a whole checkpoint into the page cache holds it until it returns."""
    def chunks(fh: BinaryIO) -> None:
        for start in range(0, len(data), WRITE_CHUNK):
            fh.write(data[start: start + WRITE_CHUNK])

    store.write_with(key, chunks, durable=False)


class CheckpointWriter:
    """One thread per process that writes hops' checkpoints behind their hand-on, in order.

    ``write`` returns a future of the write (and of ``then``, run after it: the
    removal of what the new checkpoint makes obsolete). A write that fails is
    logged: the hop that reads the checkpoint finds it missing and rewinds.
    """

    def __init__(self) -> None:
        self._pool: ThreadPoolExecutor | None = None
        self._pid = 0  # the process that started the thread: a forked child starts its own
        self._lock = threading.Lock()

    def write(self, store: Store, key: str, data: memoryview,
              then: Callable[[], None] | None = None) -> Future[None]:
        """Write ``data`` (``encode_checkpoint``'s bytes) under ``key``; a future of it."""
        def job() -> None:
            self._write(store, key, data)
            if then is not None:
                then()

        return self._submit(job)

    def save(self, store: Store, key: str, checkpoint: Checkpoint,
             then: Callable[[], None] | None = None) -> Future[bytes]:
        """Encode ``checkpoint`` and write it under ``key``; a future of its digest.

        A checkpoint in host memory is laid out and checksummed by the writer thread,
        off the caller's path, so the caller leaves its tensors as they are until the
        future is done. One with a tensor elsewhere (a GPU's) is copied to host memory
        here first, on the caller's thread and stream, as the training left it.
        """
        import torch

        cpu = torch.device("cpu")
        encoded = (None if all(t.device == cpu for t in _tensors(
            [checkpoint.model, checkpoint.optimizer])) else encode_checkpoint(checkpoint))

        def job() -> bytes:
            data, digest = encoded if encoded is not None else _encoded(key, checkpoint)
            self._write(store, key, data)
            if then is not None:
                then()
            return digest

        return self._submit(job)

    @staticmethod
    def _write(store: Store, key: str, data: memoryview) -> None:
        try:
            write_encoded(store, key, data)
        except Exception:
            log.error("checkpoint %s could not be written: the hop that reads it runs the "
                      "hop that wrote it again", key, exc_info=True)
            raise

    def _submit(self, job: Callable[[], Any]) -> Future[Any]:
        with self._lock:
            if self._pool is None or self._pid != os.getpid():
                self._pool = ThreadPoolExecutor(1, thread_name_prefix="hoptune-checkpoint",
                                                initializer=_yield_to_hops)
                self._pid = os.getpid()
            return self._pool.submit(job)


def _encoded(key: str, checkpoint: Checkpoint) -> tuple[memoryview, bytes]:
    """``encode_checkpoint`` on the writer thread, a failure logged as a failed write's."""
    try:
        return encode_checkpoint(checkpoint)
    except Exception:
        log.error("checkpoint %s could not be encoded: the hop that reads it runs the hop "
                  "that wrote it again", key, exc_info=True)
        raise


#: How much lower the writer thread's scheduling priority is than the hops' (Linux nice levels).
#: Not SCHED_IDLE, which lets the next worker's pickup preempt a write at once but gives the
#: write almost no CPU while every core is busy, long enough to outlast its reader's wait
#: (the hop that wrote it then runs again), and which an unprivileged thread cannot leave to
#: finish it. With a MiB per write call (``WRITE_CHUNK``) nice 10 measured as cheap.
WRITER_NICENESS = 10


def _yield_to_hops() -> None:
    """Lower this thread's priority (Linux: per thread): a write behind yields the CPU to the
    hand-on it is behind (the next hop's message, the broker, the next worker's pickup)."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), WRITER_NICENESS)
    except (AttributeError, OSError):  # not Linux, or not allowed: the same, a little later
        pass


def stored_digest(store: Store, key: str) -> bytes | None:
    """The digest a stored checkpoint's trailer carries; None if missing or unsummed."""
    try:
        tail = store.read_tail(key, _TAIL)
    except StoreError:
        return None
    return _trailer(tail)[1]


def _trailer(data: bytes | memoryview
             ) -> tuple[int, bytes | None, Callable[[Any], bytes] | None]:
    """How many bytes at the end of ``data`` are its trailer, the digest it carries and the
    function that computes it; (0, None, None) for data without one."""
    for tag, size, digest_of in _TRAILERS:
        end = len(tag) + size
        if len(data) >= end and bytes(data[-end:-size]) == tag:
            return end, bytes(data[-size:]), digest_of
    return 0, None, None


def checkpoints_in_memory() -> int:
    """How many trials' latest checkpoints a worker keeps in memory (0: none)."""
    return int(os.environ.get("HOPTUNE_CHECKPOINTS_IN_MEMORY", 16))


class LatestCheckpoints:
    """The latest checkpoint each trial wrote from this process, by trial, bounded.

    ``take`` hands an entry out once (the hop that takes it trains its tensors
    in place), only once its write behind is done, and only if the store still
    holds that very checkpoint: same key, same digest. An entry may also hold the
    model and optimizer that own its tensors (``trained``), for that hop to train
    on (``take_trained``). Thread-safe.
    """

    def __init__(self, limit: int | None = None) -> None:
        self.limit = checkpoints_in_memory() if limit is None else limit
        self._entries: OrderedDict[int, tuple[str, bytes | None, Checkpoint,
                                              Future[Any] | None, Any]] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def keep(self, trial_id: int, key: str, digest: bytes | None, checkpoint: Checkpoint,
             written: Future[Any] | None = None, trained: Any = None) -> None:
        """Keep ``checkpoint`` (stored under ``key`` with ``digest``, or being written there
        behind: ``written``; with no ``digest``, ``written``'s result is it: the writer's
        ``save``) as trial ``trial_id``'s latest; ``trained``: what owns its tensors (a
        hop's model and optimizer, whose ``state_dict`` it is)."""
        if self.limit <= 0:
            return
        with self._lock:
            self._entries.pop(trial_id, None)
            self._entries[trial_id] = (key, digest, checkpoint, written, trained)
            while len(self._entries) > self.limit:
                self._entries.popitem(last=False)

    def take(self, store: Store, trial_id: int, key: str) -> Checkpoint | None:
        """Trial ``trial_id``'s checkpoint ``key`` from memory, or None (not kept, or the store
        no longer holds it)."""
        found = self.take_trained(store, trial_id, key)
        return None if found is None else found[0]

    def take_trained(self, store: Store, trial_id: int, key: str
                     ) -> tuple[Checkpoint, Any] | None:
        """``take``'s checkpoint with what was kept as owning its tensors (None if nothing)."""
        with self._lock:
            entry = self._entries.pop(trial_id, None)
        digest = None if entry is None else entry[1]
        if entry is not None and entry[3] is not None:
            try:
                done = entry[3].result()  # its write behind: what the store holds is compared
            except Exception:  # noqa: BLE001 - logged by the writer; the store decides
                done = None
            digest = done if digest is None else digest
        if (entry is None or digest is None or entry[0] != key
                or stored_digest(store, key) != digest):
            self.misses += 1
            return None
        self.hits += 1
        return entry[2], entry[4]


#: A reader waits for a checkpoint whose live writer is still writing it for at most this many
#: liveness bounds: a write that hangs (a store that never answers) then costs its hop.
WRITE_WAIT_LIVENESSES = 10

#: A reader's first pause between two looks for a checkpoint not stored yet.
POLL_FIRST_SECONDS = 0.001

#: How often a reader asks whether the writer of the checkpoint it waits for still writes it.
WRITER_POLL_SECONDS = 0.5


def load_checkpoint(store: Store, key: str, device: torch.device | None = None, *,
                    wait: float = 0.0, writing: Callable[[], bool | None] | None = None
                    ) -> Checkpoint:
    """Read and check a checkpoint, its tensors loaded straight onto ``device`` (default: CPU).

    Wherever it was saved from: a GPU worker's checkpoint loads on a CPU and back.
    ``wait``: seconds to wait for a checkpoint not there yet (one written behind
    its hop's hand-on, by a writer that may still be alive). ``writing``, asked
    every ``WRITER_POLL_SECONDS`` while it is missing, says whether its writer
    still writes it: True waits on past ``wait`` (up to ``WRITE_WAIT_LIVENESSES``
    times it), False stops waiting at once (the writer is dead or its write
    failed), None (not known) leaves the wait at ``wait``.
    ``CheckpointError`` if it is missing (after the wait) or damaged.
    """
    import numpy as np
    import torch

    if wait > 0:
        _await(store, key, wait, writing)
    try:
        data = store.read_into(key, lambda n: np.empty(n, dtype=np.uint8))
    except StoreError:
        raise CheckpointError(key, "it does not exist") from None
    size, digest, digest_of = _trailer(data)
    length = len(data) - size
    if digest_of is not None and digest_of(data[:length]) != digest:
        raise CheckpointError(key, "its checksum does not match its bytes")
    try:
        if _flat.is_flat(data):  # its tensors are views of the bytes just read: no copy
            raw = _flat.decode(data, length, device)
        else:  # torch.save's (read whole, trailer and all: the zip's directory is found from
            # its end); torch.load checks one written before checksums
            raw = torch.load(io.BytesIO(memoryview(data)), weights_only=True,
                             map_location=device or torch.device("cpu"))
    except Exception as exc:  # noqa: BLE001 - any failure to decode means unreadable
        reason = "" if digest else f"no checksum at its end ({len(data)} bytes: truncated?); "
        raise CheckpointError(key, f"{reason}{type(exc).__name__}: "
                                   f"{str(exc).splitlines()[0] if str(exc) else ''}") from exc
    return Checkpoint(model=raw["model"], optimizer=raw["optimizer"],
                      samples=int(raw["samples"]), loss=float(raw["loss"]))


def _await(store: Store, key: str, seconds: float,
           writing: Callable[[], bool | None] | None = None) -> None:
    """Return once ``key`` exists, or once ``seconds`` have passed while ``writing`` (asked every
    ``WRITER_POLL_SECONDS``) does not say True, or at once when it says False; polling the
    store ever less often, for at most ``WRITE_WAIT_LIVENESSES`` times ``seconds``.

    A pause is at most a tenth of the wait so far (and at most 0.1 s): the reader
    of a checkpoint written behind its hand-on, which lands within milliseconds,
    sees it at most a tenth late, where pauses that doubled each time saw it up to
    as late again as it had waited.
    """
    started = time.monotonic()
    cap = started + seconds * (WRITE_WAIT_LIVENESSES if writing is not None else 1)
    asked, still = started, None
    while not store.exists(key):
        now = time.monotonic()
        due = now - asked >= WRITER_POLL_SECONDS or (still is None and now >= started + seconds)
        if writing is not None and due:  # and always once more before giving up at the bound
            asked, still = now, writing()
            if still is False:
                return
        deadline = cap if still else started + seconds
        if now >= deadline:
            return
        time.sleep(poll_pause(now - started, deadline - now))


def poll_pause(waited: float, left: float) -> float:
    """How long a reader that has waited ``waited`` seconds for a checkpoint, with ``left`` to
    go, pauses before it looks again: a tenth of its wait so far (at least
    ``POLL_FIRST_SECONDS``, at most 0.1 s), so it sees the checkpoint at most that late."""
    return min(max(POLL_FIRST_SECONDS, waited / 10), 0.1, left)


def set_aside(store: Store, key: str, stamp: str) -> str:
    """Move an unreadable checkpoint out of the way (kept for a look); returns its new key."""
    aside = f"{key}.unreadable-{stamp}"
    try:
        store.write_bytes(aside, store.read_bytes(key))
        store.delete(key)
    except StoreError:
        pass  # already gone: nothing to keep
    return aside


def keep_final(store: Store, study_id: int, trial_id: int, epoch: int | None,
               shards: int, also: tuple[int, ...] = ()) -> None:
    """An ended trial keeps only its final weights (epoch ``epoch``'s last hop), if any,
    and the end of each epoch in ``also`` (the best epoch's, which promotion may take).

    Promotion and the report read nothing else, and replaying a trial needs
    no checkpoint at all (it retrains from its seed in its recorded visit
    order). Checkpoints set aside as unreadable stay for an operator to see.
    """
    ends = (*also, epoch) if epoch is not None else ()
    keep = {checkpoint_key(study_id, trial_id, e, shards - 1) for e in ends}
    prefix = checkpoint_key(study_id, trial_id, 0, 0).rsplit("/", 1)[0]
    for key in store.list(prefix):
        if key not in keep and ".unreadable-" not in key:
            store.delete(key)
    for key in sorted(keep):  # they outlive the trial: the checkpoints that must be durable
        store.sync(key)
