"""What one delivery of a hop holds and reports.

``Claimed`` is a delivery that holds its hop (or found it done): what the rest of
the hop needs. ``HopReport`` is what the delivery did, for logs, events and the
benchmark; ``EpochEnd`` is the epoch's end an epoch's last hop hands the workflow.
"""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from hoptune.regions import RegionConfig
from hoptune.tasks.worker import Dispatch
from hoptune.tuner import EpochRow, HopRow, StudyRow, TrialRow

if TYPE_CHECKING:
    import torch

__all__ = ["Claimed", "EpochEnd", "HopReport"]


@dataclass(frozen=True)
class EpochEnd:
    """The last hop of an epoch is done: what the workflow needs to end the epoch.

    ``model`` holds the weights the hop trained, or None when this delivery did no
    training (a redelivery); the workflow then reads them from the checkpoint.
    ``written``: the write of the hop's checkpoint, behind its hand-on (``save``), which the
    workflow waits for before it decides the epoch; None: written already.
    """

    region: RegionConfig
    study: StudyRow
    trial: TrialRow
    epoch: int
    model: torch.nn.Module | None
    manifest: dict[str, Any]
    written: Future[Any] | None = None


@dataclass
class HopReport:
    """What one delivery of a hop did, for logs, events and the benchmark."""

    trial_id: int
    epoch: int
    position: int
    shard: int
    trained: bool = False
    samples: int = 0
    loss: float | None = None
    load_seconds: float = 0.0
    train_seconds: float = 0.0
    save_seconds: float = 0.0
    dispatch: list[Dispatch] = field(default_factory=list)
    skipped: str | None = None
    epoch_end: EpochEnd | None = None
    retry: bool = False  # the delivery failed once: send the hop again after a pause
    # why no worker may act on the message (it names a hop the study database does not
    # record so, or a shard this worker does not own): the task sets it aside as a dead letter
    set_aside: str | None = None
    # the write of its checkpoint, behind its hand-on (``save``); None: written, or none
    written: Future[Any] | None = None


@dataclass
class Claimed:
    """A delivery that holds its hop (or found it done): what the rest of the hop needs."""

    region: RegionConfig
    study: StudyRow
    trial: TrialRow
    record: EpochRow
    report: HopReport
    claim: str  # "claimed" or "done"
    hop: HopRow
    place: int | None = None  # the shard the next hop must take (a cohort's), if unvisited
    in_pass: bool = False  # a cohort's shared pass trained it (or failed) in this delivery
    # the message came before (a broker's redelivery, a retry): its earlier delivery may have
    # done the hop and stopped before handing on, so a done hop hands on again
    again: bool = True
