"""The visit-order policy: which shard a trial visits at each hop of an epoch.

Every epoch visits every shard exactly once. The order is a rotation of one
seeded permutation per (study seed, epoch); among the K rotations the policy
picks the one that collides least with the trials already running, comparing
step by step where each of them will be at the same time. Trials that start
together therefore walk the shards in lock step without meeting, the way a
Latin square schedules them. The chosen order is recorded per epoch, so
replaying a trial never needs this policy again.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence

__all__ = ["choose_visit_order"]


def choose_visit_order(
    shards: int,
    seed: int,
    epoch: int,
    others: Iterable[tuple[Sequence[int], int]] = (),
) -> list[int]:
    """A visit order for one epoch of one trial.

    ``others`` holds, for every trial currently running, its current visit
    order and the position it is at. Ties go to the lowest rotation, so the
    choice is deterministic for the same inputs.
    """
    if shards < 1:
        raise ValueError(f"shards must be >= 1, got {shards}")
    base = list(range(shards))
    random.Random(f"{seed}:{epoch}").shuffle(base)
    candidates = [base[r:] + base[:r] for r in range(shards)]
    ahead = [list(order[position:]) for order, position in others]

    def collisions(order: list[int]) -> int:
        return sum(
            1 for path in ahead for step, shard in enumerate(order[: len(path)])
            if path[step] == shard
        )

    return min(candidates, key=collisions)
