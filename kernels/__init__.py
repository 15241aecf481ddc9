"""Fused elementwise kernels for training hops, and the optimizers built on them.

The math of each kernel lives in a ``.cuh`` file; on CUDA tensors it runs as a
CuPy ``ElementwiseKernel`` on the tensors' own memory, once its self-test on
that device agreed with the torch reference (``self_test``, ``configure``);
elsewhere as its torch reference (``kernels.reference``). CuPy is imported
only when a CUDA tensor asks for a kernel, so CPU-only machines import this
package without it. The error model (``adamw_bound`` and its siblings,
``compare_by_bound``) says how far a kernel and its reference may correctly
round apart; the tests and the self-test compare by it.
"""

from __future__ import annotations

from hoptune.kernels._adamw import FusedAdamW
from hoptune.kernels._bounds import (
    adamw_bound,
    scale_bound,
    scaled_sigmoid_bound,
    scaled_sigmoid_grad_bound,
    sgd_bound,
)
from hoptune.kernels._clip import clip_grad_norm_
from hoptune.kernels._cohort import CohortAdamW, CohortSGD
from hoptune.kernels._cupy import device_names, identity
from hoptune.kernels._device_steps import DeviceSteps
from hoptune.kernels._dispatch import (
    KERNEL,
    PathChoice,
    choose_path,
    host_work_only,
    paths_taken,
)
from hoptune.kernels._error_model import Comparison, allclose_by_bound, compare_by_bound
from hoptune.kernels._factory import OPTIMIZERS, make_optimizer, optimizer_class
from hoptune.kernels._scaled_sigmoid import ScaledSigmoid, scaled_sigmoid
from hoptune.kernels._selftest import SelfTestResult, run_self_test
from hoptune.kernels._sgd import FusedSGD
from hoptune.kernels._specs import ALL as KERNEL_SPECS
from hoptune.kernels._timing import time_against_torch
from hoptune.kernels._torch_optim import TorchFusedAdamW, TorchFusedSGD
from hoptune.kernels._trust import (
    MODE_VARIABLE,
    MODES,
    KernelSelfTestError,
    check_mode,
    configure,
    kernel_report,
    mode,
    reset,
    self_test,
)

__all__ = [
    "KERNEL",
    "KERNEL_SPECS",
    "MODES",
    "MODE_VARIABLE",
    "OPTIMIZERS",
    "CohortAdamW",
    "CohortSGD",
    "DeviceSteps",
    "Comparison",
    "PathChoice",
    "FusedAdamW",
    "FusedSGD",
    "KernelSelfTestError",
    "ScaledSigmoid",
    "SelfTestResult",
    "TorchFusedAdamW",
    "TorchFusedSGD",
    "adamw_bound",
    "allclose_by_bound",
    "check_mode",
    "choose_path",
    "clip_grad_norm_",
    "compare_by_bound",
    "configure",
    "device_names",
    "host_work_only",
    "identity",
    "kernel_report",
    "make_optimizer",
    "mode",
    "optimizer_class",
    "paths_taken",
    "reset",
    "run_self_test",
    "scale_bound",
    "scaled_sigmoid",
    "scaled_sigmoid_bound",
    "scaled_sigmoid_grad_bound",
    "self_test",
    "sgd_bound",
    "time_against_torch",
]
