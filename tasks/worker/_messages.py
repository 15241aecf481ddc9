"""The messages between hoptune's tasks: their names, queues and JSON keyword arguments.

Imported by the hop, the workflow, the sweeper and the drivers alike, so that
a message is built in one place. Every message is small JSON: ids, keys and
numbers, never tensors.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hoptune.tuner import StudyDB, StudyRow

__all__ = ["CONTROL_QUEUE", "MAX_COHORT", "RETRY_SECONDS", "TASK_NAMES", "BadMessage",
           "CohortMessage", "Dispatch", "HopMessage", "cohort_dispatch", "hop_dispatch",
           "hop_queue", "parse_cohort", "parse_hop", "promote_dispatch", "tune_step_after_end",
           "tune_step_dispatch"]

# Workflow messages (tune steps, promotions, sweeps) go here; every worker consumes it.
CONTROL_QUEUE = "hoptune.control"

#: Every task a hoptune worker runs; a message naming another is set aside.
TASK_NAMES = frozenset({"hoptune.hop", "hoptune.cohort_hop", "hoptune.tune_step", "hoptune.promote",
                        "hoptune.nightly", "hoptune.sweep"})

_HOP_FIELDS = {"region": str, "study": int, "trial": int, "epoch": int, "position": int,
               "shard": int}


_COHORT_FIELDS = {"region": str, "study": int, "trials": list, "epochs": list, "position": int,
                  "shard": int}
# A cohort message sent before members could be at different epochs: one epoch for all.
_ONE_EPOCH_COHORT_FIELDS = {**{k: v for k, v in _COHORT_FIELDS.items() if k != "epochs"},
                            "epoch": int}
#: The most trials one cohort message may name (``fuse`` is bounded by it too).
MAX_COHORT = 64


class BadMessage(ValueError):
    """A message whose content no worker may act on; it is set aside, never retried."""


@dataclass(frozen=True)
class HopMessage:
    """A hop message that passed its schema: ids only; the truth is in the study database."""

    region: str
    study: int
    trial: int
    epoch: int
    position: int
    shard: int


def _check_fields(kwargs: dict[str, Any], fields: dict[str, type], what: str) -> None:
    """Every one of ``fields`` present with exactly its JSON type, no other, ints >= 0."""
    unknown = sorted(set(kwargs) - set(fields))
    missing = sorted(set(fields) - set(kwargs))
    if unknown or missing:
        raise BadMessage(f"{what} fields: unknown {unknown}, missing {missing}")
    for name, kind in fields.items():
        value = kwargs[name]
        if type(value) is not kind:
            raise BadMessage(f"{what} field {name!r}: expected {kind.__name__}, "
                             f"got {type(value).__name__} {value!r}")
        if kind is int and value < 0:
            raise BadMessage(f"{what} field {name!r}: must be >= 0, got {value}")


def parse_hop(kwargs: dict[str, Any], queue: str | None) -> HopMessage:
    """The hop ``kwargs`` as received on ``queue``, checked exactly, or ``BadMessage``.

    Exactly: every field present with its own JSON type (no ``"2"`` for ``2``, no
    ``true`` for ``1``), no field more, numbers not negative, and region and shard
    those of the queue it came from. That the fields are the hop's (a copy may be
    rewritten to match another queue) is checked against the study database at
    its claim (``hoptune.tasks.hop._admission``).
    """
    _check_fields(kwargs, _HOP_FIELDS, "hop")
    hop = HopMessage(**kwargs)
    if queue is not None and queue != hop_queue(hop.region, hop.shard):
        raise BadMessage(f"hop of {hop_queue(hop.region, hop.shard)} received on queue {queue}")
    return hop


@dataclass(frozen=True)
class CohortMessage:
    """A cohort hop message: the same (position, shard) of several trials of one study, each
    at its own epoch (a trial that joined at an epoch boundary is epochs behind the others),
    to train as one fused model. Ids only, like a hop message."""

    region: str
    study: int
    trials: tuple[int, ...]
    epochs: tuple[int, ...]
    position: int
    shard: int


def _ids(kwargs: dict[str, Any], field: str, what: str) -> None:
    for value in kwargs[field]:
        if type(value) is not int or value < 0:
            raise BadMessage(f"cohort hop field {field!r}: {what} must be ints >= 0, "
                             f"got {value!r}")


def parse_cohort(kwargs: dict[str, Any], queue: str | None) -> CohortMessage:
    """The cohort hop ``kwargs`` as received on ``queue``, checked as exactly as a hop's, or
    ``BadMessage``: ``trials`` a list of 1 to MAX_COHORT distinct trial ids and ``epochs``
    each one's epoch, both ints >= 0. A message of the earlier form, one ``epoch`` for all
    members (queued before an upgrade), is read as that epoch for each."""
    if "epoch" in kwargs and "epochs" not in kwargs:
        _check_fields(kwargs, _ONE_EPOCH_COHORT_FIELDS, "cohort hop")
        one = {k: v for k, v in kwargs.items() if k != "epoch"}
        one["epochs"] = [kwargs["epoch"]] * len(kwargs["trials"])  # checked a list just now
        kwargs = one
    _check_fields(kwargs, _COHORT_FIELDS, "cohort hop")
    trials = kwargs["trials"]
    if not 1 <= len(trials) <= MAX_COHORT:
        raise BadMessage(f"cohort hop field 'trials': 1 to {MAX_COHORT} ids, got {len(trials)}")
    _ids(kwargs, "trials", "ids")
    if len(set(trials)) != len(trials):
        raise BadMessage(f"cohort hop field 'trials': a trial named twice in {trials}")
    if len(kwargs["epochs"]) != len(trials):
        raise BadMessage(f"cohort hop field 'epochs': one per trial, got {len(kwargs['epochs'])} "
                         f"for {len(trials)}")
    _ids(kwargs, "epochs", "epochs")
    cohort = CohortMessage(**{**kwargs, "trials": tuple(trials),
                              "epochs": tuple(kwargs["epochs"])})
    if queue is not None and queue != hop_queue(cohort.region, cohort.shard):
        raise BadMessage(f"cohort hop of {hop_queue(cohort.region, cohort.shard)} received on "
                         f"queue {queue}")
    return cohort


@dataclass(frozen=True)
class Dispatch:
    """A message to send: task name, queue and JSON keyword arguments."""

    task: str
    queue: str
    kwargs: dict[str, Any]


#: The pause before a hop whose delivery failed once is tried again.
RETRY_SECONDS = 2.0


def hop_queue(region: str, shard: int) -> str:
    """The queue of shard ``shard`` of ``region``: its owners, and only they, consume it."""
    return f"hop.{region}.{shard}"


def hop_dispatch(region: str, study_id: int, trial_id: int, epoch: int, position: int,
                 shard: int) -> Dispatch:
    """The message for one hop; region and shard are there for routing and for Flower."""
    return Dispatch(
        task="hoptune.hop",
        queue=hop_queue(region, shard),
        kwargs={"region": region, "study": study_id, "trial": trial_id, "epoch": epoch,
                "position": position, "shard": shard},
    )


def cohort_dispatch(region: str, study_id: int, trial_ids: list[int], epochs: list[int],
                    position: int, shard: int) -> Dispatch:
    """The message for the hop at (position, shard) of several trials, each at its own epoch
    (``epochs[i]`` is ``trial_ids[i]``'s), trained as one cohort."""
    return Dispatch(
        task="hoptune.cohort_hop",
        queue=hop_queue(region, shard),
        kwargs={"region": region, "study": study_id, "trials": list(trial_ids),
                "epochs": list(epochs), "position": position, "shard": shard},
    )


def tune_step_dispatch(study_id: int) -> Dispatch:
    return Dispatch(task="hoptune.tune_step", queue=CONTROL_QUEUE, kwargs={"study": study_id})


def tune_step_after_end(db: StudyDB, study: StudyRow) -> list[Dispatch]:
    """The ``tune_step`` a trial's end sends (read after the end was recorded), where it has
    work: a trial to propose, a pending one to start, or the study to finish.

    With the budget spent, nothing pending and another trial running, it would
    have none, and a worker would take its turn on it before its next hop. Read
    after each end's commit, the last of several trials ending at once sees no
    other running, so the study's last step is always sent.
    """
    counts = db.counts(study.id)
    moves = (sum(counts.values()) < study.budget or counts["pending"] > 0
             or counts["running"] == 0)
    return [tune_step_dispatch(study.id)] if moves else []


def promote_dispatch(study_id: int) -> Dispatch:
    return Dispatch(task="hoptune.promote", queue=CONTROL_QUEUE, kwargs={"study": study_id})
