"""The seeds that make a trial replayable: every random stream names where it belongs.

A trial's seed derives from its study's seed and its number; each random
stream of a hop (initialisation, minibatch order, dropout) from the trial's
seed, the epoch and the shard. Plain arithmetic, no torch: the planner's
simulator draws the same trial seeds as the workflow.
"""

from __future__ import annotations

import hashlib

__all__ = ["stream_seed", "trial_seed"]


def stream_seed(*parts: int | str) -> int:
    """A 63-bit seed derived from its parts: every random stream names where it belongs."""
    digest = hashlib.sha256(":".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def trial_seed(study_seed: int, number: int) -> int:
    return stream_seed(study_seed, "trial", number) % (2**31)
