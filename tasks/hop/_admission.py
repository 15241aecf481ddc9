"""What a hop message must agree with before its hop is claimed: the study database, and the
shards this worker owns.

A message's schema and queue (``parse_hop``) are checked on its own fields, so a
copy rewritten to match another queue passes both. Before the claim the hop is
read back from the study database instead:

- the study exists and is of the message's region (``refusal``);
- this worker owns the message's shard (``--shards``), or the sweeper told it to
  take that shard's queue over (a takeover naming it): data stays where it lives;
- the trial exists and is of that study, has that epoch, position and hop
  queued, and the shard where the epoch's visit order placed the hop is the
  message's, hence the queue's (``admit``).

A message that fails any of these is set aside with the reason (the task puts it
in ``hoptune.dead``) and trains nothing. A process not started with shards of
its own (the inline runner, a test's runtime) owns every shard.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, NamedTuple

from hoptune.core import StudyError
from hoptune.tasks.worker import Runtime, hop_queue, parse_shard_spec
from hoptune.tuner import EpochRow, HopRecords, StudyRow, TrialRow, WorkerRecords

if TYPE_CHECKING:
    from sqlalchemy import Connection

__all__ = ["Admitted", "admission", "admit", "hop_name", "owns", "refusal", "started_owning"]


class Admitted(NamedTuple):
    """A hop the study database records as the message names it: its rows."""

    study: StudyRow
    trial: TrialRow
    record: EpochRow


def hop_name(trial_id: int, epoch: int, position: int) -> str:
    """How a reason names the hop it is about."""
    return f"hop of trial {trial_id} epoch {epoch} position {position}"


def refusal(rt: Runtime, region: str, study_id: int, shard: int, conn: Connection | None = None
            ) -> StudyRow | str:
    """The study a hop or cohort message of ``region``'s ``shard`` names, or why this worker
    may not act on it: no such study, another region's, or a shard it does not own. ``conn``:
    a transaction to read in (``admission``'s), else one of its own."""
    try:
        if conn is not None:
            study = rt.db.study(study_id, conn)
        else:
            with rt.db.reading() as conn:
                study = rt.db.study(study_id, conn)
    except StudyError as exc:
        return str(exc)
    if study.region != region:
        return f"study {study.id} is of region {study.region}, not {region}"
    if not owns(rt, region, shard):
        return (f"worker {rt.worker} does not own shard {region}:{shard} and was not told "
                f"to take {hop_queue(region, shard)} over")
    return study


def started_owning(region: str, shard: int) -> bool:
    """Whether this worker was started owning ``region``'s ``shard``
    (``HOPTUNE_WORKER_SHARDS``; a process started without it owns every one)."""
    spec = os.environ.get("HOPTUNE_WORKER_SHARDS")
    return not spec or (region, shard) in parse_shard_spec(spec)


def owns(rt: Runtime, region: str, shard: int) -> bool:
    """Whether this worker may train ``region``'s ``shard``: it was started owning it, or the
    sweeper recorded a takeover of its queue by this worker (before telling it to consume)."""
    if started_owning(region, shard):
        return True
    queue = hop_queue(region, shard)
    return any(t["queue"] == queue and t["worker"] == rt.worker
               for t in WorkerRecords(rt.db).takeovers())


def admission(rt: Runtime, region: str, study_id: int, shard: int, trial_id: int, epoch: int,
              position: int) -> Admitted | str:
    """``refusal`` and then ``admit`` of a hop message, read in one transaction."""
    with rt.db.reading() as conn:
        study = refusal(rt, region, study_id, shard, conn)
        if isinstance(study, str):
            return f"{hop_name(trial_id, epoch, position)}: {study}"
        return admit(rt, trial_id, epoch, position, study=study, shard=shard, conn=conn)


def admit(rt: Runtime, trial_id: int, epoch: int, position: int, *,
          study: StudyRow | None = None, shard: int | None = None,
          conn: Connection | None = None) -> Admitted | str:
    """The rows of hop (trial, epoch, position), or why no worker may act on a message naming
    it: the trial, its epoch or the hop is not recorded, the trial is not of ``study`` (the
    message's), or the hop was placed on another shard than ``shard`` (the message's).
    ``conn``: a transaction to read in, else one of its own."""
    if conn is None:
        with rt.db.reading() as conn:  # one transaction, which takes no write lock
            return admit(rt, trial_id, epoch, position, study=study, shard=shard, conn=conn)
    db = rt.db
    where = hop_name(trial_id, epoch, position)
    try:
        trial = db.trial(trial_id, conn)
    except StudyError as exc:
        return f"{where}: {exc}"
    if study is None:
        study = db.study(trial.study_id, conn)
    elif trial.study_id != study.id:
        return f"{where}: trial {trial_id} is of study {trial.study_id}, not {study.id}"
    record = db.epoch(trial_id, epoch, conn)
    if record is None:
        return f"{where}: trial {trial_id} has no epoch {epoch}"
    if position >= len(record.visit_order):
        return (f"{where}: an epoch of study {study.id} has {len(record.visit_order)} "
                f"positions")
    if HopRecords(db).get(trial_id, epoch, position, conn) is None:
        return f"{where}: never queued"
    placed = record.visit_order[position]
    if shard is not None and placed != shard:
        return f"{where}: placed on shard {placed}, not {shard}"
    return Admitted(study, trial, record)
