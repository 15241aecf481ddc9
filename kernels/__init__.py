"""Fused elementwise kernels for training hops, and the optimizers built on them.

The math of each kernel lives in a ``.cuh`` file; on CUDA tensors it runs as a
CuPy ``ElementwiseKernel`` on the tensors' own memory, elsewhere as its torch
reference (``kernels.reference``). CuPy is imported only when a CUDA tensor
asks for a kernel, so CPU-only machines import this package without it.
"""

from __future__ import annotations

from kernels._adamw import FusedAdamW
from kernels._clip import clip_grad_norm_
from kernels._factory import OPTIMIZERS, make_optimizer
from kernels._scaled_sigmoid import ScaledSigmoid, scaled_sigmoid
from kernels._sgd import FusedSGD

__all__ = [
    "OPTIMIZERS",
    "FusedAdamW",
    "FusedSGD",
    "ScaledSigmoid",
    "clip_grad_norm_",
    "make_optimizer",
    "scaled_sigmoid",
]
