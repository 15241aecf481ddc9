"""Checkpoints: a trial's model and optimizer state after one hop.

Keyed by (study, trial, epoch, position in the visit order), so a hop knows
before it trains whether its output already exists. Serialised with
``torch.save`` into bytes and written to the store atomically; loaded with
``weights_only=True`` (tensors and plain containers only, never pickled code).

Each checkpoint ends with a checksum of the bytes before it (``HTCK`` and a
SHA-256): a truncated or damaged file is found when it is read, and raises
``CheckpointError`` naming it, instead of a confusing error from deep inside
``torch.load``.

Durability: a hop's checkpoint is written without fsync. A host crash may
lose it or cut it short; the hop that reads it then finds it missing or its
checksum wrong and runs the hop before again (a rewind): the cost is one hop,
the same as a worker killed mid-hop. Only what outlives the trial is synced:
its final checkpoint (``keep_final``), which promotion and the report read.

A worker keeps the latest checkpoint of each trial it trained in memory
(``LatestCheckpoints``): the trial's next hop, if it lands on the same worker,
takes it from there after reading only the stored file's checksum (its last
36 bytes), so a copy that the store no longer holds is never used.
"""

from __future__ import annotations

import hashlib
import io
import os
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, BinaryIO

from hoptune.core import CheckpointError, Store, StoreError

if TYPE_CHECKING:
    import torch

__all__ = ["Checkpoint", "LatestCheckpoints", "checkpoint_key", "previous_position",
           "save_checkpoint", "load_checkpoint", "stored_digest", "set_aside", "keep_final",
           "checkpoints_in_memory"]

_TRAILER = b"HTCK"
_DIGEST = hashlib.sha256().digest_size


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


def save_checkpoint(store: Store, key: str, checkpoint: Checkpoint) -> bytes:
    """Write the checkpoint atomically, streamed straight into the store, unsynced.

    Returns its SHA-256 (the digest its trailer carries).
    """
    payload = {
        "model": checkpoint.model,
        "optimizer": checkpoint.optimizer,
        "samples": checkpoint.samples,
        "loss": checkpoint.loss,
    }
    digest: list[bytes] = []
    store.write_with(key, lambda fh: digest.append(_write_summed(fh, payload)), durable=False)
    return digest[0]


def stored_digest(store: Store, key: str) -> bytes | None:
    """The SHA-256 a stored checkpoint's trailer carries; None if missing or unsummed."""
    try:
        tail = store.read_tail(key, len(_TRAILER) + _DIGEST)
    except StoreError:
        return None
    if len(tail) != len(_TRAILER) + _DIGEST or not tail.startswith(_TRAILER):
        return None
    return tail[len(_TRAILER):]


def checkpoints_in_memory() -> int:
    """How many trials' latest checkpoints a worker keeps in memory (0: none)."""
    return int(os.environ.get("HOPTUNE_CHECKPOINTS_IN_MEMORY", 16))


class LatestCheckpoints:
    """The latest checkpoint each trial wrote from this process, by trial, bounded.

    ``take`` hands an entry out once (the hop that takes it trains its tensors
    in place) and only if the store still holds that very checkpoint: same
    key, same SHA-256. Thread-safe.
    """

    def __init__(self, limit: int | None = None) -> None:
        self.limit = checkpoints_in_memory() if limit is None else limit
        self._entries: OrderedDict[int, tuple[str, bytes, Checkpoint]] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def keep(self, trial_id: int, key: str, digest: bytes, checkpoint: Checkpoint) -> None:
        if self.limit <= 0:
            return
        with self._lock:
            self._entries.pop(trial_id, None)
            self._entries[trial_id] = (key, digest, checkpoint)
            while len(self._entries) > self.limit:
                self._entries.popitem(last=False)

    def take(self, store: Store, trial_id: int, key: str) -> Checkpoint | None:
        with self._lock:
            entry = self._entries.pop(trial_id, None)
        if entry is None or entry[0] != key or stored_digest(store, key) != entry[1]:
            self.misses += 1
            return None
        self.hits += 1
        return entry[2]


class _Summing(io.RawIOBase):
    """A write-only stream that hashes what passes through it to ``out``."""

    def __init__(self, out: BinaryIO) -> None:
        self.out, self.sha = out, hashlib.sha256()

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        self.sha.update(data)
        return self.out.write(data)


def _write_summed(fh: BinaryIO, payload: dict[str, Any]) -> bytes:
    import torch

    summing = _Summing(fh)
    torch.save(payload, summing)
    digest = summing.sha.digest()
    fh.write(_TRAILER + digest)
    return digest


def load_checkpoint(store: Store, key: str, device: torch.device | None = None) -> Checkpoint:
    """Read and check a checkpoint, its tensors loaded straight onto ``device`` (default: CPU).

    Wherever it was saved from: a GPU worker's checkpoint loads on a CPU and back.
    ``CheckpointError`` if it is missing or damaged.
    """
    import torch

    try:
        data = store.read_bytes(key)
    except StoreError:
        raise CheckpointError(key, "it does not exist") from None
    body, trailer = data[: -len(_TRAILER) - _DIGEST], data[-len(_TRAILER) - _DIGEST:]
    summed = trailer[: len(_TRAILER)] == _TRAILER
    if summed and hashlib.sha256(body).digest() != trailer[len(_TRAILER):]:
        raise CheckpointError(key, "its checksum does not match its bytes")
    try:
        # a checkpoint written before checksums is read whole; torch.load still checks it
        raw = torch.load(io.BytesIO(body if summed else data),
                         map_location=device or torch.device("cpu"), weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any failure to unpickle means unreadable
        reason = "" if summed else f"no checksum at its end ({len(data)} bytes: truncated?); "
        raise CheckpointError(key, f"{reason}{type(exc).__name__}: "
                                   f"{str(exc).splitlines()[0] if str(exc) else ''}") from exc
    return Checkpoint(model=raw["model"], optimizer=raw["optimizer"],
                      samples=int(raw["samples"]), loss=float(raw["loss"]))


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
