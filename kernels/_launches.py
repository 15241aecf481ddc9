"""How each kernel is called: its arguments, built from tensors, and one launch.

The optimizers, clipping and the scaled sigmoid launch their kernels through
these functions, and so does the self-test, so the code a self-test checks is
the code a hop runs. ``launch`` defaults to ``_cupy.launch``, looked up at call
time; the self-test and the tests pass another launcher of the same signature.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from hoptune.kernels import _cupy
from hoptune.kernels._multi_tensor import (
    PointerTable,
    device_table,
    pointer_table,
    step_rows,
    to_device_reals,
    vector_width,
)
from hoptune.kernels._source import KernelSpec
from hoptune.kernels._specs import (
    ADAMW,
    ADAMW_COHORT,
    ADAMW_ROWS,
    SCALE,
    SCALED_SIGMOID,
    SCALED_SIGMOID_GRAD,
    SGD,
    SGD_COHORT,
)
from hoptune.kernels.reference import AdamWScalars, SGDScalars

__all__ = [
    "ADAMW_ROLES",
    "SGD_ROLES",
    "Launcher",
    "adamw",
    "CohortSteps",
    "adamw_cohort",
    "adamw_cohort_steps",
    "adamw_rows",
    "cohort_steps",
    "dtype_name",
    "run",
    "scale",
    "scaled_sigmoid",
    "scaled_sigmoid_grad",
    "reads_vectors",
    "sgd",
    "sgd_cohort",
    "sgd_cohort_steps",
    "table_width",
]

#: ``launch(spec, dtype name, device, args, size)``, as ``_cupy.launch``.
Launcher = Callable[[KernelSpec, str, torch.device, Mapping[str, Any], int], None]

Slot = tuple[torch.Tensor | None, ...]

#: The tensor roles of an AdamW slot and of an SGD slot, in their order (the table's rows).
ADAMW_ROLES = ("params", "grads", "exp_avgs", "exp_avg_sqs", "max_exp_avg_sqs")
SGD_ROLES = ("params", "grads", "momentum_buffers")


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def run(
    spec: KernelSpec,
    dtype: torch.dtype,
    device: torch.device,
    args: Mapping[str, Any],
    size: int,
    launch: Launcher | None = None,
) -> None:
    """Launch spec with args (one per parameter, by name)."""
    names = [p.name for p in spec.params]
    if sorted(args) != sorted(names):
        raise TypeError(f"{spec.name}: expected arguments {names}, got {sorted(args)}")
    (launch or _cupy.launch)(spec, dtype_name(dtype), device, args, size)


def _multi_tensor(
    spec: KernelSpec,
    roles: Sequence[str],
    slots: Sequence[Slot],
    device: torch.device,
    dtype: torch.dtype,
    extra: Mapping[str, Any],
    launch: Launcher | None,
    table: PointerTable | None = None,
) -> None:
    """One launch of spec over slots, or over ``table`` where the caller placed them already
    (a planned step: ``kernels._plan``). A kernel that reads vectors gets a table laid out
    in vectors where its tensors allow (``table_width``)."""
    vectors = reads_vectors(spec)
    if table is None:
        table = pointer_table({role: [s[r] for s in slots] for r, role in enumerate(roles)},
                              device, vector_width(dtype) if vectors else 1)
    if table.size == 0:
        return
    args = {**table.args(), **extra}
    if vectors:
        args["vector"] = table.vector
    run(spec, dtype, device, args, table.size, launch)


def reads_vectors(spec: KernelSpec) -> bool:
    """Whether spec's kernel reads its tensors in vectors (it takes ``vector``)."""
    return any(p.name == "vector" for p in spec.params)


def table_width(spec: KernelSpec, dtype: torch.dtype) -> int:
    """The vector a table for spec's kernel over ``dtype`` tensors is laid out in, aligned
    pointers given: HT_VEC for a kernel that reads vectors, else 1."""
    return vector_width(dtype) if reads_vectors(spec) else 1


def adamw(
    slots: Sequence[Slot],
    device: torch.device,
    dtype: torch.dtype,
    scalars: AdamWScalars,
    *,
    amsgrad: bool,
    maximize: bool,
    launch: Launcher | None = None,
    table: PointerTable | None = None,
) -> None:
    """One AdamW step over slots of (param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq), or
    over ``table`` (rows ``ADAMW_ROLES``) built from them."""
    extra = {**vars(scalars), "amsgrad": int(amsgrad), "maximize": int(maximize)}
    _multi_tensor(ADAMW, ADAMW_ROLES, slots, device, dtype, extra, launch, table)


def adamw_rows(
    slots: Sequence[Slot],
    device: torch.device,
    dtype: torch.dtype,
    rows: torch.Tensor,
    row: torch.Tensor,
    *,
    amsgrad: bool,
    maximize: bool,
    launch: Launcher | None = None,
    table: PointerTable | None = None,
) -> None:
    """``adamw`` with the step's scalars row ``row[0]`` of ``rows`` (steps x ``ADAMW_FIELDS``,
    ``dtype``, on ``device``): nothing in the launch comes from the host that changes from
    one step to the next."""
    extra = {"rows": rows, "row": row, "amsgrad": int(amsgrad), "maximize": int(maximize)}
    _multi_tensor(ADAMW_ROWS, ADAMW_ROLES, slots, device, dtype, extra, launch, table)


def sgd(
    slots: Sequence[Slot],
    device: torch.device,
    dtype: torch.dtype,
    scalars: SGDScalars,
    *,
    nesterov: bool,
    first_step: bool,
    maximize: bool,
    launch: Launcher | None = None,
    table: PointerTable | None = None,
) -> None:
    """One SGD step over slots of (param, grad, momentum_buffer), or over ``table`` (rows
    ``SGD_ROLES``) built from them."""
    extra = {
        **vars(scalars),
        "nesterov": int(nesterov),
        "first_step": int(first_step),
        "maximize": int(maximize),
    }
    _multi_tensor(SGD, SGD_ROLES, slots, device, dtype, extra, launch, table)


def _cohort(
    spec: KernelSpec,
    roles: Sequence[str],
    slots: Sequence[Slot],
    device: torch.device,
    dtype: torch.dtype,
    rows: Sequence[Sequence[float]],
    extra: Mapping[str, Any],
    launch: Launcher | None,
    steps: CohortSteps | None = None,
) -> None:
    """A multi-tensor launch over stacked tensors (axis 0 the trial, len(rows[0]) trials)
    with rows, one per scalar field, of one value per trial; or, with ``steps`` (slots and
    rows unused), the step its table on the device and its counter say."""
    if steps is None:
        steps = cohort_steps(spec, roles, slots, device, dtype, [rows])
    cohort = {"per_trial": steps.per_trial, "scalars": steps.scalars, "row": steps.row,
              "n_trials": steps.n_trials}
    _multi_tensor(spec, roles, (), device, dtype, {**cohort, **extra}, launch, steps.table)


@dataclass(frozen=True)
class CohortSteps:
    """What a cohort launch reads from the device: the table placing its tensors, each
    tensor's elements per trial, the scalars of one or more steps (each a table of rows
    of one value per trial) and the counter of the step the launch takes."""

    table: PointerTable
    per_trial: torch.Tensor
    scalars: torch.Tensor
    row: torch.Tensor
    n_trials: int


def cohort_steps(spec: KernelSpec, roles: Sequence[str], slots: Sequence[Slot],
                 device: torch.device, dtype: torch.dtype,
                 steps: Sequence[Sequence[Sequence[float]]]) -> CohortSteps:
    """``CohortSteps`` for slots of stacked tensors and the rows of each step in ``steps``;
    its counter at the first (a launch alone reads a shared 0)."""
    n_trials = len(steps[0][0])
    kept = [s for s in slots if s[0] is not None and s[0].numel() > 0]
    per_trial = device_table(tuple(s[0].numel() // n_trials for s in kept) + (1,), device)
    table = pointer_table({role: [s[r] for s in kept] for r, role in enumerate(roles)},
                          device, table_width(spec, dtype))
    rows = [row for step in steps for row in step]
    if len(steps) == 1:
        return CohortSteps(table, per_trial, to_device_reals(rows, device, dtype),
                           device_table((0,), device), n_trials)
    scalars, row = step_rows(rows, device, dtype)
    return CohortSteps(table, per_trial, scalars, row, n_trials)


def _adamw_rows_of(scalars: Sequence[AdamWScalars]) -> list[tuple[float, ...]]:
    """A step's table of AdamW scalars: one row per field, one value per trial."""
    return list(zip(*(s.as_tuple() for s in scalars), strict=True))


def _sgd_rows_of(scalars: Sequence[SGDScalars], first_step: Sequence[bool]
                 ) -> list[tuple[float, ...]]:
    """A step's table of SGD scalars, then each trial's first_step as 0 or 1."""
    return [*zip(*(s.as_tuple() for s in scalars), strict=True),
            tuple(float(f) for f in first_step)]


def adamw_cohort(
    slots: Sequence[Slot],
    device: torch.device,
    dtype: torch.dtype,
    scalars: Sequence[AdamWScalars],
    *,
    amsgrad: bool,
    maximize: bool,
    launch: Launcher | None = None,
    steps: CohortSteps | None = None,
) -> None:
    """One AdamW step of a cohort: slots as ``adamw``'s, of stacked tensors whose axis 0
    is the trial; trial i steps with scalars[i]. With ``steps`` (``adamw_cohort_steps``),
    slots and scalars are unused: the step is the one its counter says."""
    extra = {"amsgrad": int(amsgrad), "maximize": int(maximize)}
    rows = [] if steps is not None else _adamw_rows_of(scalars)
    _cohort(ADAMW_COHORT, ADAMW_ROLES, slots, device, dtype, rows, extra, launch, steps)


def adamw_cohort_steps(slots: Sequence[Slot], device: torch.device, dtype: torch.dtype,
                       steps: Sequence[Sequence[AdamWScalars]]) -> CohortSteps:
    """The table, and each step's scalars (steps[j][i]: trial i's at step j), of a cohort's
    next AdamW steps, for ``adamw_cohort(..., steps=)``."""
    return cohort_steps(ADAMW_COHORT, ADAMW_ROLES, slots, device, dtype,
                        [_adamw_rows_of(s) for s in steps])


def sgd_cohort(
    slots: Sequence[Slot],
    device: torch.device,
    dtype: torch.dtype,
    scalars: Sequence[SGDScalars],
    first_step: Sequence[bool],
    *,
    nesterov: bool,
    maximize: bool,
    launch: Launcher | None = None,
    steps: CohortSteps | None = None,
) -> None:
    """One SGD step of a cohort: slots as ``sgd``'s, stacked; trial i steps with
    scalars[i] and starts its momentum buffer where first_step[i]. With ``steps``
    (``sgd_cohort_steps``), slots, scalars and first_step are unused."""
    extra = {"nesterov": int(nesterov), "maximize": int(maximize)}
    rows = [] if steps is not None else _sgd_rows_of(scalars, first_step)
    _cohort(SGD_COHORT, SGD_ROLES, slots, device, dtype, rows, extra, launch, steps)


def sgd_cohort_steps(slots: Sequence[Slot], device: torch.device, dtype: torch.dtype,
                     scalars: Sequence[SGDScalars], first_step: Sequence[bool]
                     ) -> CohortSteps:
    """The table and scalars of a cohort's SGD step, the same at every step while the
    scalars and first_step stay (the counter is a shared 0, never advanced)."""
    return cohort_steps(SGD_COHORT, SGD_ROLES, slots, device, dtype,
                        [_sgd_rows_of(scalars, first_step)])


def scale(
    values: Sequence[torch.Tensor],
    device: torch.device,
    dtype: torch.dtype,
    coef: torch.Tensor,
    launch: Launcher | None = None,
) -> None:
    """values *= coef in place, for every tensor; coef is a one-element tensor on device."""
    extra = {"coef": coef.to(dtype).reshape(1)}
    _multi_tensor(SCALE, ("values",), [(v,) for v in values], device, dtype, extra, launch)


def scaled_sigmoid(
    x: torch.Tensor, scale_: float, launch: Launcher | None = None
) -> torch.Tensor:
    """scale_ * sigmoid(x) in a new tensor (x contiguous)."""
    y = torch.empty_like(x)
    run(SCALED_SIGMOID, x.dtype, x.device, {"x": x, "scale": scale_, "y": y}, x.numel(), launch)
    return y


def scaled_sigmoid_grad(
    x: torch.Tensor, grad_out: torch.Tensor, scale_: float, launch: Launcher | None = None
) -> torch.Tensor:
    """The gradient of scaled_sigmoid at x times grad_out, in a new tensor (both contiguous)."""
    grad_x = torch.empty_like(x)
    args = {"x": x, "grad_out": grad_out, "scale": scale_, "grad_x": grad_x}
    run(SCALED_SIGMOID_GRAD, x.dtype, x.device, args, x.numel(), launch)
    return grad_x
