"""A fused optimizer's next steps with nothing from the host: what a CUDA graph can record.

A planned step (``kernels._plan``) is one launch, but its scalars come from
the host: AdamW's bias corrections change every step, so each launch passes
new numbers, and a graph, which replays the arguments it recorded, cannot
hold it. ``FusedOptimizer.device_steps(count)`` prepares the next ``count``
steps of every parameter group at once: for AdamW their scalars, computed on
the host exactly as the planned step computes them, as rows of a table on the
device and a counter on the device that says which row a launch reads
(``ht_adamw_rows``), advanced by the step itself; for SGD, whose scalars stay
the same from step to step, the planned launch as it is. A cohort's
optimizers do the same with their per-trial tables (``ht_adamw_cohort`` reads
the step its counter says; ``ht_sgd_cohort``'s table stays). ``DeviceSteps.step``
then launches one step, host arguments unchanged from one step to the next,
so a capture records it once and every replay takes the next step, bitwise
the planned step it stands for. ``DeviceSteps.counted`` counts each step
taken on the host (the state's step counts, which a checkpoint saves), once
per step whether it was launched from Python or replayed.

The steps hold while the plan does: the same parameters with gradients at
the same addresses (a graph's), the same hyperparameters. A pass of a hop
prepares them after its graph's first step and drops them at its end
(``tasks.hop._steps``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

__all__ = ["DeviceSteps"]


class DeviceSteps:
    """``count`` steps of one optimizer, each ``step()`` the same launches (one per parameter
    group), each followed by ``counted()``, which runs each group's host count."""

    def __init__(self, launches: Sequence[Callable[[], None]],
                 counts: Sequence[Callable[[], object]], count: int) -> None:
        self.launches, self.counts = list(launches), list(counts)
        self.count = self.left = count

    def step(self) -> None:
        """Launch one step of every group: what a CUDA graph records, or runs eagerly."""
        for launch in self.launches:
            launch()

    def counted(self) -> None:
        """Count one step taken (launched or replayed) on the host, as a step from Python
        does (a planned step's ``StepPlan.advance``, a cohort's step tensors)."""
        if self.left <= 0:
            raise RuntimeError(f"DeviceSteps: the {self.count} steps prepared are all taken")
        self.left -= 1
        for count in self.counts:
            count()
