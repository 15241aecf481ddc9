"""Hops that go on where they are: a worker runs the next hop itself when it owns its shard.

A short hop's fixed cost is mostly its message: sent to the broker, fetched by a
worker, handed to its training process (10 to 30 ms on a 2-core host, as long
as a 10-thousand-row region's epoch). Where the next hop's shard is one this
worker owns (a region of one shard every worker holds, or a worker owning
several shards), the hop delivery runs that hop next, in the same process, and
sends every other message as before. The next hop is recorded as queued in the
hand-on's transaction exactly as if its message had been sent, so every fault
guarantee holds: a worker that dies during a hop it chained leaves that hop
held by a dead worker, which the sweeper sends again, as it sends a hop whose
message its sender died before sending; and the delivery that started the chain,
never acknowledged, comes back from the broker later (at once from RabbitMQ,
after the visibility timeout from Redis) and finds its own hop done.

A chain goes on while its delivery has run under ``chain_seconds()``
(``HOPTUNE_CHAIN_SECONDS``, default 1; 0 turns chaining off): hops of a second
or more never chain, and the messages of other trials and regions on this
worker's queues wait at most that long more than they would.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from hoptune.tasks.hop import HopReport, run_hop, started_owning
from hoptune.tasks.study._workflow import hand_on
from hoptune.tasks.worker import (
    RETRY_SECONDS,
    TRANSIENT,
    Dispatch,
    Runtime,
    chain_seconds,
    parse_hop,
)

__all__ = ["go_on_here", "owned_here"]

log = logging.getLogger(__name__)


def owned_here(d: Dispatch) -> bool:
    """Whether ``d`` is a hop whose shard this worker was started owning (a shard taken over
    later goes by message, as before)."""
    return d.task == "hoptune.hop" and started_owning(d.kwargs["region"], d.kwargs["shard"])


def go_on_here(rt: Runtime, report: HopReport, send: Callable[..., None], *,
               started: float, on_progress: Callable[[HopReport], None] | None = None,
               seconds: float | None = None) -> list[HopReport]:
    """Hand ``report``'s hop on, running each next hop this worker owns here while the
    delivery (begun at ``started``, ``time.monotonic()``) has run under ``seconds``
    (default ``chain_seconds()``); ``send(dispatches, countdown=None)`` sends every other
    message as soon as it is known. Returns the reports of the hops run here."""
    limit = chain_seconds() if seconds is None else seconds
    reports: list[HopReport] = []
    dispatches = hand_on(rt, report)
    while True:
        here = next((d for d in dispatches if owned_here(d)), None)
        if here is None or time.monotonic() - started >= limit:
            send(dispatches)
            return reports
        send([d for d in dispatches if d is not here])
        message = parse_hop(here.kwargs, here.queue)
        log.info("hop: trial %d epoch %d position %d runs here next, its message not sent",
                 message.trial, message.epoch, message.position)
        try:
            report = run_hop(rt, message.trial, message.epoch, message.position,
                             on_progress=on_progress, message=message)
        except TRANSIENT:  # given back by run_hop: its message retries it, as a delivery's would
            log.warning("hop of trial %d run here failed for now: sent instead", message.trial,
                        exc_info=True)
            send([here], countdown=RETRY_SECONDS)
            return reports
        reports.append(report)
        if report.set_aside is not None:  # never for a hop this worker recorded: logged
            log.error("hop of trial %d run here was set aside: %s", message.trial,
                      report.set_aside)
            return reports
        if report.retry:  # failed once: its message tries it again after the same pause
            send([here], countdown=RETRY_SECONDS)
            return reports
        dispatches = hand_on(rt, report)
