"""A fused optimizer's step on the kernel path, planned once and reused while it holds.

A step of a parameter group finds the parameters with a gradient, sorts them
by device, dtype and step count, checks that every tensor can be addressed
directly, builds the pointer table and launches: in Python, per parameter,
about 150 microseconds for ten tensors and a millisecond for a hundred on a
2-core host, longer than the whole of torch's fused step on a GPU. All of it
but the gradients' addresses and the step count stays the same from one step
to the next. A plan keeps it: the parameters and their state tensors, their
addresses and sizes, and the step count they share. A planned step checks
that the plan still holds (the same parameters with a gradient, at the same
addresses, with the same step tensors, contiguous gradients, and the kernel
path still chosen for them), adds 1 to every step count in one operation, and
launches over the table of those addresses (cached: the same addresses give
the same table on the device). Where the plan does not hold, the step runs as
it would without one and plans again; loading a state dict drops the plans.
The update launched is the same kernel with the same scalars over the same
tensors, so a planned step is bitwise the unplanned one.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from hoptune.kernels import _dispatch
from hoptune.kernels._launches import table_width
from hoptune.kernels._multi_tensor import PointerTable, aligned_width, placed_table
from hoptune.kernels._source import KernelSpec

__all__ = ["StepPlan", "plan_step"]


class StepPlan:
    """One parameter group's step on the kernel path: its tensors, placed once.

    ``params`` are the group's parameters with a gradient, in order;
    ``state`` one tuple per role after params and grads (exp_avg, ... ; None
    where a role has no tensor), each a tensor per parameter; ``steps`` the
    parameters' step tensors (empty for an optimizer without one) and
    ``step`` the count they share; ``watched`` the per-parameter tensors that must
    stay the same objects for the plan to hold (the step tensors, by default; SGD's
    momentum buffers); ``options`` what else the plan was made for (flags of the
    group that change the tensors it holds).
    """

    def __init__(self, spec: KernelSpec, group: dict, params: Sequence[torch.Tensor],
                 state: Sequence[Sequence[torch.Tensor | None]], steps: Sequence[torch.Tensor],
                 step: float, options: tuple, device: torch.device, dtype: torch.dtype,
                 roles: tuple[str, ...], watched: Sequence[torch.Tensor | None] | None = None
                 ) -> None:
        self.spec, self.group, self.options = spec, group, options
        self.device, self.dtype, self.roles = device, dtype, roles
        self.params = list(params)
        self.ids = tuple(map(id, self.params))
        self.pointers = self._pointers(self.params)
        self.steps, self.step = list(steps), step
        self.watched = list(self.steps if watched is None else watched)
        # a zero-element parameter has no place in the table (as in ``pointer_table``)
        self.placed = [j for j, p in enumerate(self.params) if p.numel() > 0]
        self.sizes = tuple(_real_numel(self.params[j]) for j in self.placed)
        self.state_pointers = tuple(
            0 if role[j] is None else role[j].data_ptr() for role in state for j in self.placed)
        #: the one tensor the step tensors view, where they were made views (``count_as_one``)
        self.counter: torch.Tensor | None = None
        self.placed_pointers = tuple(self.pointers[j] for j in self.placed)
        #: the vector the kernel reads where the step's pointers are aligned for it: the
        #: parameters' and their state's are the plan's, so only the gradients' vary
        self.width = aligned_width(self.placed_pointers + self.state_pointers,
                                   table_width(spec, dtype))

    def _pointers(self, tensors: Sequence[torch.Tensor]) -> tuple[int, ...]:
        return tuple(t.data_ptr() for t in tensors)

    def serves(self, group: dict, params: Sequence[torch.Tensor], options: tuple) -> bool:
        """Whether the plan is for this step of ``group``: the same options, the same
        parameters with a gradient, where they were, and still the kernel path for them."""
        return (group is self.group and options == self.options
                and tuple(map(id, params)) == self.ids
                and self._pointers(params) == self.pointers
                and _dispatch.kernel_path(self.spec, self.device, self.dtype).path
                == _dispatch.KERNEL)

    def holds(self, watched: Sequence[torch.Tensor | None],
              grads: Sequence[torch.Tensor]) -> bool:
        """Whether, for the parameters it ``serves``, their ``watched`` tensors are still the
        plan's and the kernel can address these gradients."""
        return (all(a is b for a, b in zip(watched, self.watched, strict=True))
                and all(g.is_contiguous() for g in grads))

    def count_as_one(self, states: Sequence[dict]) -> None:
        """Make the parameters' step tensors (``states[i]["step"]``, equal counts) views of one
        tensor, so that ``advance`` counts every one of them in one operation. A step without
        the plan still adds to each view alone, and a state dict holds each as its own."""
        self.counter = torch.tensor([self.step] * len(states), dtype=self.steps[0].dtype,
                                    device=self.steps[0].device)
        for i, state in enumerate(states):
            state["step"] = self.counter[i]
        self.steps = self.watched = [state["step"] for state in states]

    def advance(self) -> float:
        """Count one step on every parameter; the new count."""
        if self.counter is not None:
            self.counter.add_(1)
        elif self.steps:
            torch._foreach_add_(self.steps, 1)
        self.step += 1
        return self.step

    def table(self, grads: Sequence[torch.Tensor]) -> PointerTable:
        """The pointer table of this step: the plan's tensors and these gradients."""
        grad_pointers = tuple(grads[j].data_ptr() for j in self.placed)
        return placed_table(self.roles, self.placed_pointers + grad_pointers + self.state_pointers,
                            self.sizes, self.device, aligned_width(grad_pointers, self.width))


def _real_numel(t: torch.Tensor) -> int:
    return t.numel() * 2 if torch.is_complex(t) else t.numel()


def plan_step(spec: KernelSpec, group: dict, params: Sequence[torch.Tensor],
              state: Sequence[Sequence[torch.Tensor | None]], steps: Sequence[torch.Tensor],
              options: tuple, roles: tuple[str, ...],
              watched: Sequence[torch.Tensor | None] | None = None) -> StepPlan | None:
    """The plan of the step just taken for ``params`` (each with a gradient and its state
    made), or None where a plan cannot serve it: no parameters, several devices or dtypes,
    step counts that differ, the reference path, or a tensor the kernel cannot address."""
    if not params:
        return None
    first = torch.view_as_real(params[0]) if torch.is_complex(params[0]) else params[0]
    device, dtype = first.device, first.dtype
    if _dispatch.kernel_path(spec, device, dtype).path != _dispatch.KERNEL:
        return None
    counts = {float(s) for s in steps}
    if len(counts) > 1:
        return None
    for j, p in enumerate(params):
        tensors = [p, p.grad, *(role[j] for role in state)]
        for t in tensors:
            if t is None:
                continue
            real = torch.view_as_real(t) if torch.is_complex(t) else t
            if real.device != device or real.dtype != dtype or not t.is_contiguous():
                return None
    return StepPlan(spec, group, params, state, steps, counts.pop() if counts else 0.0,
                    options, device, dtype, roles, watched)
