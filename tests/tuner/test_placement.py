"""The placement policy's choices: idle owners first, then the shortest backlog, then order."""

from __future__ import annotations

import pytest

from hoptune.tuner import (
    ShardLoads,
    cohort_size,
    first_shards,
    idle_owners,
    next_shard,
    placed_order,
)
from hoptune.tuner._placement import as_loads


def test_an_idle_shard_wins_over_the_tentative_order():
    loads = as_loads(queued={2: 1}, running={1: 1})
    assert next_shard([1, 2, 3], loads) == 3


def test_equal_loads_keep_the_tentative_order():
    assert next_shard([2, 0, 1], as_loads({})) == 2
    assert next_shard([2, 0, 1], as_loads({0: 1, 1: 1, 2: 1})) == 2


def test_when_none_is_idle_the_shortest_backlog_wins():
    loads = as_loads(queued={0: 3, 1: 1, 2: 2}, running={0: 1, 1: 1, 2: 1})
    assert next_shard([0, 2, 1], loads) == 1


def test_replicas_share_a_backlog():
    # shard 0 has two owners, one busy: still idle, so it beats busy shard 1
    loads = ShardLoads(running={0: 1, 1: 1}, owners={0: ["a", "b"], 1: ["c"]},
                       held={"a": 1, "c": 1})
    assert next_shard([1, 0], loads) == 0
    loads.running[0], loads.held["b"] = 2, 1  # both owners busy: backlog 1 each, tie, order
    assert next_shard([1, 0], loads) == 1


def test_idle_owners_hold_and_await_less_than_a_hop_each_counted_once():
    # one worker owning both shards, a cohort's three next hops queued on shard 0: none idle
    loads = ShardLoads(queued={0: 3}, owners={0: ["a"], 1: ["a"]}, held={})
    assert idle_owners(loads, 2) == []
    loads.queued = {}  # idle, and one worker however many shards it owns
    assert idle_owners(loads, 2) == ["a"]
    # every shard its own (unknown) owner: shard 1's has nothing to do
    assert idle_owners(as_loads({0: 3}), 2) == ["shard-1"]
    # b, a replica of shard 0 and owner of shard 2, trains on 2; a trains on 0
    loads = ShardLoads(running={0: 1, 2: 1}, owners={0: ["a", "b"], 1: ["a"], 2: ["b"]},
                       held={"a": 1, "b": 1})
    assert idle_owners(loads, 3) == []
    loads.running, loads.held = {0: 1}, {"a": 1}  # b is done
    assert idle_owners(loads, 3) == ["b"]


@pytest.mark.parametrize(("starting", "fuse", "idle", "size"), [
    (4, 4, 2, 2),   # two idle workers: two cohorts of two, not one of four
    (4, 4, 1, 4),   # one idle worker: one cohort
    (4, 4, 0, 4),   # none idle: as few cohorts as fuse allows
    (5, 4, 0, 3),   # five need two cohorts: three and two, not four and one
    (8, 4, 3, 3),   # three idle workers: cohorts of three, three and two
    (3, 2, 8, 1),   # more idle workers than trials: one each
    (1, 4, 2, 1),
    (6, 1, 0, 1),   # fuse = 1: every trial alone
])
def test_a_cohort_takes_as_many_as_fuse_allows_spread_over_the_idle_workers(
        starting, fuse, idle, size):
    assert cohort_size(starting, fuse, idle) == size


def test_a_worker_owning_two_shards_is_busy_for_both():
    # worker "a" owns shards 0 and 1 and trains on 0; "b" owns shard 2 and is idle
    loads = ShardLoads(running={0: 1}, owners={0: ["a"], 1: ["a"], 2: ["b"]}, held={"a": 1})
    assert next_shard([1, 2], loads, shards=3) == 2


def test_first_hops_spread_over_the_shards():
    orders = first_shards([[0, 1, 2], [0, 1, 2], [0, 1, 2], [0, 1, 2]], as_loads({}))
    assert [o[0] for o in orders] == [0, 1, 2, 0]
    assert all(sorted(o) == [0, 1, 2] for o in orders)


def test_placed_order_keeps_the_visited_prefix():
    assert placed_order([3, 1, 0, 2], 2, 2) == [3, 1, 2, 0]
    with pytest.raises(ValueError, match="not among the unvisited"):
        placed_order([3, 1, 0, 2], 2, 1)
    with pytest.raises(ValueError, match="no unvisited"):
        next_shard([], as_loads({}))


def test_among_equals_the_worker_handing_on_keeps_the_trial():
    # worker "a" owns shards 0 and 1 and just finished the trial's hop on 0: it holds the
    # checkpoint in memory, so the idle shard 1 beats the equally idle shard 2 placed first
    loads = ShardLoads(owners={0: ["a"], 1: ["a"], 2: ["b"]}, held={})
    assert next_shard([2, 1], loads, shards=3, here="a") == 1
    assert next_shard([2, 1], loads, shards=3) == 2
    loads.held["a"] = 1  # a busy "a" loses to an idle "b" all the same
    assert next_shard([2, 1], loads, shards=3, here="a") == 2
