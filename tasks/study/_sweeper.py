"""The sweeper: sends again whatever work a fault may have lost, judged by liveness.

Every message a step of the workflow sends is recorded first (a hop as
``queued``, an epoch's end as its last hop ``done``, a promotion as a finished
study), and every receiver is idempotent (a hop is claimed before it trains,
an epoch ends once, a promotion is recorded once). So sending any of them
again costs nothing, and the sweeper does, for:

- hops running on a worker whose heartbeat stopped (killed mid-hop): queued
  again, counted as interrupted, and sent;
- queued hops whose message may be lost (the sender died between recording
  and sending, or Redis restarted empty): sent again once their shard's queue
  holds nothing and they waited ``HOPTUNE_RESEND_SECONDS``;
- epochs whose last hop finished but whose end was never decided;
- running studies with a free trial slot and no progress, ended studies
  with no promotion, and promoted nightly studies whose region's outcome (and
  with the run's last one, the run's end) was never recorded;
- shards whose queue has waiting hops and no live consumer for
  ``HOPTUNE_TAKEOVER_SECONDS``: a live worker is told to consume it too
  (Celery's ``add_consumer``), reading the shard from the store.

It runs inside the workers (one at a time), under ``hoptune beat``, in every
following command, and as ``hoptune sweep``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from datetime import timedelta

from celery import Celery

from hoptune.tasks.hop import form_cohorts
from hoptune.tasks.worker import (
    Dispatch,
    Runtime,
    hop_dispatch,
    hop_queue,
    live_after,
    promote_dispatch,
    tune_step_dispatch,
)
from hoptune.tuner import HopRecords, NightlyRecords, WaitingHop, WorkerRecords, utcnow

__all__ = ["queue_lengths", "resend_seconds", "sweep", "takeover_seconds"]

log = logging.getLogger(__name__)


def resend_seconds() -> float:
    """How long recorded work may wait with no message before it is sent again."""
    return float(os.environ.get("HOPTUNE_RESEND_SECONDS", "30"))


def takeover_seconds() -> float:
    """How long a shard's hops may wait with no live consumer before one takes it over."""
    return float(os.environ.get("HOPTUNE_TAKEOVER_SECONDS", "60"))


def sweep(rt: Runtime, app: Celery | None = None, study_id: int | None = None, *,
          resend_after: float | None = None) -> list[Dispatch]:
    """The messages that put lost work (of every study, or only ``study_id``'s) in motion.

    With ``app`` the sweeper also reads queue lengths (so a hop still waiting in
    its queue is not sent twice) and takes over shards with no live consumer.
    """
    db = rt.db
    now = utcnow()
    before = now - timedelta(seconds=resend_seconds() if resend_after is None else resend_after)
    mine = (lambda s: study_id in (None, s))  # noqa: E731 - a filter read three times
    out: list[Dispatch] = []
    for hop in HopRecords(db).release_dead(live_after()):
        trial = db.trial(hop.trial_id)
        study = db.study(trial.study_id)
        if not mine(study.id):
            continue
        log.warning("hop %d of trial %d (epoch %d position %d) was held by %s, which is gone: "
                    "sending it again", hop.id, hop.trial_id, hop.epoch,
                    hop.position, hop.holder)
        out.append(hop_dispatch(study.region, study.id, hop.trial_id, hop.epoch,
                                hop.position, hop.shard))
    length = queue_lengths(app)
    waiting = [h for h in HopRecords(db).waiting(before) if mine(h.study_id)]
    for hop in waiting:
        if length(hop_queue(hop.region, hop.shard)):
            continue  # its message may still be in the queue
        out.append(hop_dispatch(hop.region, hop.study_id, hop.trial_id, hop.epoch,
                                hop.position, hop.shard))
    for trial in db.stalled_trials(before):
        if not mine(trial.study_id):
            continue
        last = HopRecords(db).last(trial.id)
        record = db.epoch(trial.id, last.epoch) if last else None
        if (last and record and last.state == "done" and record.finished_at is None
                and last.position == len(record.visit_order) - 1):
            study = db.study(trial.study_id)
            log.warning("trial %d: epoch %d ended but was never decided: sending its last hop "
                        "again", trial.id, last.epoch)
            out.append(hop_dispatch(study.region, study.id, trial.id, last.epoch,
                                    last.position, last.shard))
    promoted: list[int] = []  # studies of nightly runs still going, promoted before ``before``
    going = NightlyRecords(db).going()
    for study in db.studies():
        if not mine(study.id):
            continue
        if study.state != "running":
            if study.promotion is None and study.finished_at < before:
                log.warning("study %d ended without a promotion: sending it again", study.id)
                out.append(promote_dispatch(study.id))
            elif study.nightly_run_id in going and study.finished_at < before:
                promoted.append(study.id)
            continue
        trials = db.trials(study.id)
        running = sum(t.state == "running" for t in trials)
        quiet = all(t.updated_at < before for t in trials)
        if running < study.parallel and quiet:
            out.append(tune_step_dispatch(study.id))
    # a promotion recorded whose nightly outcome is not (its worker died between the two): the
    # promotion, sent again, returns its recorded decision and records the outcome
    for study_id in NightlyRecords(db).undecided(promoted):
        log.warning("study %d was promoted but its nightly outcome was never recorded: sending "
                    "its promotion again", study_id)
        out.append(promote_dispatch(study_id))
    if app is not None:
        _take_over(rt, app, [h for h in waiting
                             if h.queued_at < now - timedelta(seconds=takeover_seconds())])
    return form_cohorts(rt, out)  # hops a cohort lost go on together


def queue_lengths(app: Celery | None) -> Callable[[str], int]:
    """A function giving a queue's length in the broker (0 without a broker to ask)."""
    if app is None:
        return lambda queue: 0

    def length(queue: str) -> int:
        try:
            with app.connection_for_write() as conn:
                return int(conn.default_channel.queue_declare(queue, passive=True).message_count)
        except Exception:  # noqa: BLE001 - kombu says "no such queue" by raising: it is empty
            return 0

    return length


def _take_over(rt: Runtime, app: Celery, waiting: list[WaitingHop]) -> None:
    """Tell a live worker to consume every queue whose hops wait with no live consumer."""
    queues = {hop_queue(h.region, h.shard) for h in waiting}
    if not queues:
        return
    active = app.control.inspect(timeout=1.0).active_queues() or {}
    consumed = {name: {q["name"] for q in qs} for name, qs in active.items()}
    if not consumed:
        return  # no live worker answers: nothing to hand the queue to
    records = WorkerRecords(rt.db)
    for queue in sorted(queues):
        if any(queue in qs for qs in consumed.values()):
            continue
        region = queue.split(".")[1]
        # prefer a worker that already trains this region, then the least loaded one
        target = min(consumed, key=lambda n: (not any(q.startswith(f"hop.{region}.")
                                                        for q in consumed[n]),
                                              len(consumed[n]), n))
        reason = f"no live consumer for {takeover_seconds():.0f} s"
        # recorded first: the worker trains the queue's hops only once it finds its takeover
        records.add_takeover(queue, target, reason)
        app.control.add_consumer(queue, destination=[target], reply=True, timeout=2.0)
        consumed[target].add(queue)
        log.warning("shard queue %s has %s: %s takes it over", queue, reason, target)
