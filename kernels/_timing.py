"""How long a kernel takes next to the torch path that replaces it where it is not trusted.

For ``hoptune doctor``: one launch over about a million elements, the median of
a few, for the CuPy kernel and for what runs instead (torch.optim's fused
AdamW/SGD for the optimizers, the torch reference for the others).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch

from hoptune.kernels import _launches, reference
from hoptune.kernels._launches import Launcher
from hoptune.kernels._source import KernelSpec
from hoptune.kernels._torch_optim import TorchFusedAdamW, TorchFusedSGD
from hoptune.kernels.reference import AdamWScalars, SGDScalars

__all__ = ["time_against_torch"]


def _median_ms(run: Callable[[], object], device: torch.device, repeats: int) -> float:
    run()  # warm-up (and compilation)
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        started = time.perf_counter()
        run()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e3


def time_against_torch(spec: KernelSpec, device: torch.device, *, size: int = 1 << 20,
                       repeats: int = 10, launch: Launcher | None = None
                       ) -> tuple[float, float]:
    """(kernel ms, torch path ms) of one launch of spec over ``size`` float32 elements."""
    g = torch.Generator().manual_seed(0)

    def tensor(scale: float = 1.0, positive: bool = False) -> torch.Tensor:
        t = torch.randn(size, generator=g) * scale
        return (t.abs() if positive else t).to(device)

    name = spec.name
    if name in ("ht_adamw", "ht_sgd"):
        param, grad = tensor().requires_grad_(), tensor()
        param.grad = grad
        if name == "ht_adamw":
            m, v = tensor(0.1), tensor(0.01, positive=True)
            scalars = AdamWScalars.for_step(lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8,
                                            weight_decay=0.01, step=2)

            def ours() -> None:
                _launches.adamw([(param.detach(), grad, m, v, None)], device, torch.float32,
                                scalars, amsgrad=False, maximize=False, launch=launch)

            theirs = TorchFusedAdamW([param], lr=1e-3).step
        else:
            buf = tensor(0.1)
            sgd = SGDScalars.for_group(lr=0.01, weight_decay=0.0, momentum=0.9, dampening=0.0)

            def ours() -> None:
                _launches.sgd([(param.detach(), grad, buf)], device, torch.float32, sgd,
                              nesterov=False, first_step=False, maximize=False, launch=launch)

            theirs = TorchFusedSGD([param], lr=0.01, momentum=0.9).step
    elif name == "ht_scale":
        values, coef = tensor(), torch.tensor([0.5], device=device)

        def ours() -> None:
            _launches.scale([values], device, torch.float32, coef, launch)

        def theirs() -> None:
            reference.scale_(values, coef)
    else:
        x, grad_out = tensor(6.0), tensor()
        if name == "ht_scaled_sigmoid":
            def ours() -> None:
                _launches.scaled_sigmoid(x, 4.0, launch)

            def theirs() -> None:
                reference.scaled_sigmoid(x, 4.0)
        else:
            def ours() -> None:
                _launches.scaled_sigmoid_grad(x, grad_out, 4.0, launch)

            def theirs() -> None:
                reference.scaled_sigmoid_grad(x, grad_out, 4.0)
    return _median_ms(ours, device, repeats), _median_ms(theirs, device, repeats)
