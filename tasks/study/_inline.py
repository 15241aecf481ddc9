"""Run messages in this process instead of sending them: for tests, replays and debugging.

The same plain functions the Celery tasks call, in a loop: a hop's hand-on
runs next, then the one after, until no message is left.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable

from hoptune.tasks.hop import HopReport, run_cohort_hop, run_hop, wait_written
from hoptune.tasks.study._promotion import promote_study
from hoptune.tasks.study._sweeper import sweep
from hoptune.tasks.study._workflow import hand_on, hand_on_cohort, tune_step
from hoptune.tasks.worker import Dispatch, Runtime

__all__ = ["run_inline"]


def run_inline(rt: Runtime, dispatches: Iterable[Dispatch],
               on_hop: Callable[[HopReport], None] | None = None, limit: int = 100_000) -> int:
    """Execute ``dispatches`` and everything they lead to; returns how many messages ran."""
    queue = deque(dispatches)
    count = 0
    while queue:
        if count >= limit:
            raise RuntimeError(f"more than {limit} messages; a loop in the workflow?")
        d = queue.popleft()
        count += 1
        if d.task == "hoptune.hop":
            report = run_hop(rt, d.kwargs["trial"], d.kwargs["epoch"], d.kwargs["position"])
            wait_written(report)  # one hop at a time: each written before the next
            if on_hop is not None:
                on_hop(report)
            queue.extend(hand_on(rt, report))
            if report.retry:
                queue.append(d)
        elif d.task == "hoptune.cohort_hop":
            k = d.kwargs
            reports = run_cohort_hop(rt, k["trials"], k["epochs"], k["position"], k["shard"])
            wait_written(*reports)
            for report in reports if on_hop is not None else ():
                on_hop(report)
            queue.extend(hand_on_cohort(rt, reports))
            if any(r.retry for r in reports):
                queue.append(d)
        elif d.task == "hoptune.tune_step":
            queue.extend(tune_step(rt, d.kwargs["study"]))
        elif d.task == "hoptune.promote":
            promote_study(rt, d.kwargs["study"])
        elif d.task == "hoptune.sweep":
            queue.extend(sweep(rt))
        else:
            raise ValueError(f"unknown task {d.task!r}")
    return count
