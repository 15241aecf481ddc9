from __future__ import annotations

from tasks import choose_visit_order


def test_every_shard_exactly_once() -> None:
    for shards in range(1, 9):
        for epoch in range(4):
            order = choose_visit_order(shards, seed=7, epoch=epoch)
            assert sorted(order) == list(range(shards))


def test_deterministic_for_same_inputs() -> None:
    others = [([2, 0, 1, 3], 1)]
    assert choose_visit_order(4, 3, 1, others) == choose_visit_order(4, 3, 1, others)


def test_concurrent_trials_start_on_distinct_shards_and_never_meet() -> None:
    shards = 5
    running: list[tuple[list[int], int]] = []
    for _ in range(shards):
        order = choose_visit_order(shards, seed=11, epoch=0, others=running)
        running.append((order, 0))
    # walking in lock step, no two trials are ever on the same shard at the same step
    for step in range(shards):
        at_step = [order[step] for order, _ in running]
        assert len(set(at_step)) == shards


def test_avoids_the_shards_a_running_trial_is_about_to_visit() -> None:
    other = [3, 1, 0, 2]
    order = choose_visit_order(4, seed=5, epoch=2, others=[(other, 1)])
    ahead = other[1:]
    assert all(order[i] != ahead[i] for i in range(len(ahead)))
