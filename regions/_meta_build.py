"""A model built on the meta device without drawing values its tensors do not have.

The planner counts a model's parameters, and a hop restores a trial's model for
a checkpoint's tensors to take their places, by building it on the meta device
(``Family.build_on_meta``): shapes, no memory. Its initialisation still draws:
torch runs ``normal_`` on the meta device through its Python references, whose
first call in a process imports its compiler stack (2.2 to 3.4 s on a 2-core
host), and each call costs Python work. ``NoValuesDrawn`` leaves those draws
out on meta tensors (the rating model's build on the meta device: 5.7 ms with
them, 0.4 to 0.8 ms without); a tensor anywhere else draws as ever. A torch
function mode holds for the thread that entered it only.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["NoValuesDrawn"]

#: The in-place random draws a model's initialisation makes: they set values, never shapes.
_DRAWS = frozenset({"normal_", "uniform_", "random_", "bernoulli_", "exponential_",
                    "log_normal_", "cauchy_", "geometric_"})


class NoValuesDrawn(torch.overrides.TorchFunctionMode):
    """Within it, a random draw into a meta tensor returns that tensor as it is."""

    def __torch_function__(self, func: Any, types: Any, args: tuple = (),
                           kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if getattr(func, "__name__", "") in _DRAWS:
            # the tensor drawn into: ``Tensor.normal_``'s self, ``nn.init.normal_``'s ``tensor=``
            tensor = args[0] if args else kwargs.get("tensor")
            if isinstance(tensor, torch.Tensor) and tensor.is_meta:
                return tensor
        return func(*args, **kwargs)
