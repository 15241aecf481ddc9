"""Early stopping of weak trials: asynchronous successive halving (ASHA) over epochs.

Rungs sit at epochs ``min_epochs * reduction_factor**k`` below ``max_epochs``
(epochs count from 1; epoch e is a rung once its e-th epoch has ended). A
study too short for a rung (``min_epochs >= max_epochs``) prunes nothing. At a
rung a trial goes on only if its value ranks in the top ``1/reduction_factor``
of the values recorded at that rung so far, by any trial of the study, itself
included. Nothing waits for the rung to fill: a decision uses what has been
recorded when the trial gets there, as ASHA does.

With few values (fewer than ``reduction_factor``), the top fraction would hold
no trial, so at least one place is kept: a trial goes on if it is the best
recorded so far. The first trial to reach a rung always goes on; the second
goes on only if it beats the first. A value tied with the last kept place goes
on. A non-finite value (a diverged trial) is pruned at any epoch.

Judged again (``recheck``, the default): the first trials of a study reach a
rung with nobody to compare with, so a bad early trial passed every rung and
trained to the end while better later ones stopped at the first (seen: a trial
at RMSE 1.82 trained all 8 epochs while 12 better ones stopped after one). So
at every epoch end a trial is judged again at each rung it has passed, by the
same rule, against every value recorded there since: what decides is where it
stands among the study's trials at that rung, not whether it came early.
Stopping a trial only ends it, so every trial's weights still replay bitwise.

Brackets (``brackets``, as Hyperband's): a rung after one epoch favours the trials
that learn fastest, and on real data those are often not the ones that end best
(on MovieLens 100k, learning rates near 0.01 led after one epoch and overfitted
from the second, while rates near 0.001, last after one epoch, ended best). So
the study's trials take turns over ``brackets`` first rungs: trial ``n`` (0-based,
in the order proposed) is in bracket ``n % brackets`` and is judged first at
epoch ``min_epochs * reduction_factor**bracket``, then at every rung after it,
against every trial's values there. A bracket whose first rung is at or past the
last epoch trains its trials to the end. With ``brackets = 1`` every trial is
judged from the first rung (plain ASHA).

Immutable and stateless: safe to share between threads and processes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from hoptune.core import ConfigError

__all__ = ["AshaPruner"]


@dataclass(frozen=True, kw_only=True)
class AshaPruner:
    """ASHA across epochs; ``where`` prefixes configuration errors."""

    reduction_factor: int = 2  # the configuration's default (``regions.Pruner``)
    min_epochs: int = 1
    max_epochs: int
    recheck: bool = True
    brackets: int = 1  # plain ASHA; the configuration's default is 3 (``regions.Pruner``)
    where: str = field(default="pruner", compare=False, repr=False)

    def __post_init__(self) -> None:
        for name, value, least in (
            ("reduction_factor", self.reduction_factor, 2),
            ("min_epochs", self.min_epochs, 1),
            ("max_epochs", self.max_epochs, 1),
            ("brackets", self.brackets, 1),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ConfigError(f"{self.where}: {name} ({value!r}) must be an integer >= {least}")
        if not isinstance(self.recheck, bool):
            raise ConfigError(f"{self.where}: recheck ({self.recheck!r}) must be true or false")

    def rungs(self) -> tuple[int, ...]:
        """The epochs after which trials are compared, in increasing order."""
        rungs = []
        epoch = self.min_epochs
        while epoch < self.max_epochs:
            rungs.append(epoch)
            epoch *= self.reduction_factor
        return tuple(rungs)

    def should_prune(
        self, epoch: int, value: float, rung_values: Sequence[float], minimize: bool = True
    ) -> bool:
        """Whether a trial that just ended ``epoch`` with ``value`` stops now.

        ``rung_values`` are the values every trial of the study recorded at this
        epoch so far, this trial's ``value`` included.
        """
        self._check_epoch(epoch)
        if not math.isfinite(value):
            return True
        if epoch not in self.rungs():
            return False
        if value not in rung_values:
            raise ValueError(f"rung_values must include this trial's value {value!r}")
        recorded = [v for v in rung_values if math.isfinite(v)]
        kept = max(1, len(recorded) // self.reduction_factor)
        if minimize:
            better = sum(v < value for v in recorded)
        else:
            better = sum(v > value for v in recorded)
        return better >= kept

    @classmethod
    def from_settings(cls, settings: Any, max_epochs: int, *, where: str = "pruner"
                      ) -> AshaPruner:
        """The pruner of a region's ``pruner`` settings (``regions.Pruner``, or anything with
        its fields: the planner's study ``Shape``) for a study of ``max_epochs`` epochs."""
        return cls(reduction_factor=settings.reduction_factor, min_epochs=settings.min_epochs,
                   max_epochs=max_epochs, recheck=settings.recheck, brackets=settings.brackets,
                   where=where)

    def first_rung(self, number: int) -> int:
        """The first epoch at which the study's trial ``number`` (0-based, in the order
        proposed) is judged: its bracket's."""
        return self.min_epochs * self.reduction_factor ** (number % self.brackets)

    def judged_at(self, number: int) -> tuple[int, ...]:
        """The rungs at which trial ``number`` is judged (its bracket's first and after)."""
        first = self.first_rung(number)
        return tuple(r for r in self.rungs() if r >= first)

    def should_stop(self, epoch: int, history: Sequence[float],
                    rung_values: Mapping[int, Sequence[float]], minimize: bool = True,
                    *, number: int = 0) -> bool:
        """Whether the study's trial ``number`` (0-based; it sets the bracket), which just
        ended ``epoch``, stops now: judged at this epoch and, with ``recheck``, again at every
        rung it passed before, from its bracket's first rung.

        ``history[i]`` is the trial's value after epoch ``i + 1`` (``history[epoch - 1]``
        the one just recorded); ``rung_values[r]`` the values every trial of the study
        recorded at rung ``r`` so far, this trial's included.
        """
        self._check_epoch(epoch)
        if len(history) < epoch:
            raise ValueError(f"history holds {len(history)} values, not the {epoch} epochs")
        if not math.isfinite(history[epoch - 1]):
            return True
        judged = [r for r in self.judged_at(number)
                  if r == epoch or (self.recheck and r < epoch)]
        return any(self.should_prune(r, history[r - 1], rung_values[r], minimize)
                   for r in judged)

    def _check_epoch(self, epoch: int) -> None:
        if not 1 <= epoch <= self.max_epochs:
            raise ValueError(f"epoch {epoch} is outside 1..{self.max_epochs}")
