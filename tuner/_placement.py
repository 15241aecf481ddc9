"""The placement policy: which shard a trial's next hop goes to, by the load of the workers.

An epoch visits every shard once, but in no fixed order: at each hand-on the
next shard is chosen among the trial's shards not yet visited this epoch,
preferring a shard with an idle owner, then the shortest backlog per owner;
ties go to the earlier shard of the epoch's tentative order (the
collision-avoiding rotation of ``choose_visit_order``), so equal loads give the
same order as before. The choice is recorded as it is made, so replaying a
trial reads its visit order and never calls this policy again.

Plain functions over plain data: the loads are passed in (from the study
database, or from a simulator), nothing here reads a queue or a clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

__all__ = ["ShardLoads", "as_loads", "cohort_size", "first_shards", "idle_owners", "next_shard",
           "placed_order"]


@dataclass
class ShardLoads:
    """Hops waiting and running per shard, and which workers own each shard.

    ``owners[k]`` names the live workers consuming shard ``k``'s queue; a shard
    nobody is known to own counts as owned by one worker of its own. A worker
    owning several shards shares its time among them: its load is the hops
    running on it plus its share (one over the number of owners) of the
    hops waiting on each of its shards.
    """

    queued: dict[int, int] = field(default_factory=dict)
    running: dict[int, int] = field(default_factory=dict)
    owners: dict[int, list[str]] = field(default_factory=dict)
    # running hops per worker; None: spread each shard's running hops over its owners
    held: dict[str, int] | None = None

    def owners_of(self, shard: int) -> list[str]:
        return self.owners.get(shard) or [f"shard-{shard}"]

    def worker_load(self, worker: str, shards: Iterable[int]) -> float:
        mine = [k for k in shards if worker in self.owners_of(k)]
        waiting = sum(self.queued.get(k, 0) / len(self.owners_of(k)) for k in mine)
        if self.held is not None:
            return self.held.get(worker, 0) + waiting
        return waiting + sum(self.running.get(k, 0) / len(self.owners_of(k)) for k in mine)

    def add(self, shard: int) -> None:
        """Count one more hop waiting on ``shard`` (a choice just made)."""
        self.queued[shard] = self.queued.get(shard, 0) + 1


def _idle(loads: ShardLoads, worker: str, every: Sequence[int]) -> bool:
    """Whether ``worker`` would start a hop sent now: it holds and awaits less than one."""
    return loads.worker_load(worker, every) < 1


def idle_owners(loads: ShardLoads, shards: int) -> list[str]:
    """The owners of the shards (``range(shards)``) that would start a hop sent now. A
    worker owning several shards counts once."""
    every = range(shards)
    return sorted({w for k in every for w in loads.owners_of(k) if _idle(loads, w, every)})


def cohort_size(starting: int, fuse: int, idle: int) -> int:
    """The most of ``starting`` trials (of one cohort key, starting together) one cohort
    takes: ``fuse``, but no more than spreads them over the ``idle`` owners of shards.

    A cohort trains on one worker at a time, so four trials in one cohort while a
    second worker idles would train slower than two cohorts of two, one each.
    The trials form ``max(ceil(starting / fuse), min(idle, starting))`` cohorts of
    near equal size; with no idle shard, as few as ``fuse`` allows.
    """
    if starting < 1:
        return max(fuse, 1)
    cohorts = max(-(-starting // max(fuse, 1)), min(idle, starting))
    return -(-starting // cohorts)


def _key(loads: ShardLoads, shard: int, every: Sequence[int], here: str | None
         ) -> tuple[bool, float, bool]:
    owners = loads.owners_of(shard)
    idle = any(_idle(loads, w, every) for w in owners)
    backlog = (loads.running.get(shard, 0) + loads.queued.get(shard, 0)) / len(owners)
    return not idle, backlog, here not in owners


def next_shard(unvisited: Sequence[int], loads: ShardLoads, shards: int | None = None,
               here: str | None = None) -> int:
    """The shard, among ``unvisited`` (in tentative order), the next hop should go to.

    Idle first, then the shortest backlog per owner, then a shard of worker
    ``here`` (the one handing on: it holds the trial's checkpoint in memory),
    then the earliest in ``unvisited``.
    """
    if not unvisited:
        raise ValueError("no unvisited shard left to choose from")
    every = range(shards) if shards is not None else unvisited
    return min(enumerate(unvisited), key=lambda p: (*_key(loads, p[1], every, here), p[0]))[1]


def placed_order(tentative: Sequence[int], position: int, shard: int) -> list[int]:
    """``tentative`` with ``shard`` moved to ``position``; the positions before it stay."""
    head, rest = list(tentative[:position]), [s for s in tentative[position:] if s != shard]
    if shard in head or len(head) + 1 + len(rest) != len(tentative):
        raise ValueError(f"shard {shard} is not among the unvisited {list(tentative[position:])}")
    return [*head, shard, *rest]


def first_shards(tentative: Sequence[Sequence[int]], loads: ShardLoads,
                 here: str | None = None) -> list[list[int]]:
    """Visit orders for trials starting together, their first hops spread over the shards.

    Each trial in turn takes the least loaded shard of its tentative order, and
    that hop counts toward the next trial's choice. ``loads`` is updated.
    """
    out = []
    for order in tentative:
        shard = next_shard(order, loads, len(order), here)
        loads.add(shard)
        out.append(placed_order(order, 0, shard))
    return out


def as_loads(queued: Mapping[int, int], running: Mapping[int, int] | None = None
             ) -> ShardLoads:
    """Loads with one owner per shard, from counts alone (tests, simulations)."""
    return ShardLoads(queued=dict(queued), running=dict(running or {}))
