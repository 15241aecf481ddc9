"""Fused cohorts: several trials' models of one family as one batched model.

N trials of one region whose models can be made the same shape train as one
model: each parameter (and buffer) of the N models is stacked along a new
leading trial axis, and the family's loss runs once for all of them through
``torch.func`` (``vmap`` over ``functional_call`` of a shape-only template on
the meta device), each trial on its own batch. ``rating_mf`` has its stacked
loss written out (``stacked_rating_losses``: the same operations on each
trial's rows, without vmap's and the module calls' overhead per step, which
on the CPU cost more than a cohort's arithmetic). The gradient of the summed
per-trial losses with respect to trial i's slice is trial i's own gradient
(the trials share no parameter), so a cohort optimizer
(``kernels.CohortAdamW``/``CohortSGD``) steps every trial as it would alone.

Which trials fuse (``cohort_key``; equal keys fuse):

* ``rating_mf``: any two. Embedding sizes differ: every trial is zero-padded
  to the largest ``embedding_dim``. ``reg`` differs: it is a per-trial value
  (the template's ``reg`` becomes a buffer that ``functional_call`` fills per
  trial).
* ``mlp``: the same ``layers`` and ``activation`` and no dropout (dropout
  draws its masks from one random stream per trial, which a batched forward
  cannot reproduce); hidden widths are zero-padded to the largest ``hidden``.
* a factory family: the same parameters apart from the optimizer's (a
  factory's model may keep any hyperparameter as a plain attribute, which a
  shared template cannot vary per trial), and a forward that ``vmap`` can
  run: ``fuse`` tries one batch first and returns ``Unfusable`` with the
  reason when it cannot (``.item()``, data-dependent control flow, random
  ops, in-place updates of buffers); ``log_unfused`` logs that once.

Why padded units start at zero and stay zero, bit for bit:

* rating_mf. Padded coordinates d of the user and item vectors are 0. The
  score adds ``u_d * v_d = 0`` (exact), so every trial's prediction and loss
  are its own. Their gradient is ``g * v_d = 0`` from the score and
  ``2 * reg * u_d / B = 0`` from the regularisation: exactly 0 (a product with
  an exact zero; only a non-finite upstream gradient, which would ruin the
  trial alone too, gives NaN).
* mlp. A padded hidden unit j has a zero weight row and zero bias, so its
  pre-activation is 0 and its output ``act(0) = 0`` for relu, tanh and gelu;
  the next layer's column j is zero too. Backwards: column j's gradient is
  ``delta * h_j = 0``; unit j's delta is ``(column j)^T delta' * act'(0) = 0``,
  so row j's and bias j's gradients are 0.
* the optimizers, with a zero gradient on a zero parameter and zero state:
  AdamW gives ``m = v = 0`` and ``p = 0 * decay + (step * 0) / (0 + eps) = 0``
  for any weight decay (``eps > 0``: ``CohortTrainer`` refuses padding with
  eps = 0); SGD gives ``g = 0 + wd * 0 = 0``, ``buf = 0``, ``p = 0 - lr * 0
  = 0``. So padding never leaks into a trial, and cutting a trial's slice back
  to its own shape gives its own weights and optimizer state.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.func import functional_call, vmap

from hoptune.regions._families import OPTIMIZER_PARAMS, Family
from hoptune.regions._models import stacked_rating_losses

__all__ = ["FusedModel", "Unfusable", "cohort_key", "fuse", "fuse_limit", "log_unfused"]

log = logging.getLogger(__name__)

#: Built-in families: the hyperparameters a cohort pads to its largest value.
_PADDED = {"rating_mf": ("embedding_dim",), "mlp": ("hidden",)}
#: Built-in families: hyperparameters the model keeps as plain float attributes, which a
#: fused model carries per trial as buffers (module attribute -> hyperparameter).
_PER_TRIAL = {"rating_mf": {"reg": "reg"}}
_PREFIX = "model."


def _rating_losses(template: nn.Module, params: Mapping[str, torch.Tensor],
                   buffers: Mapping[str, torch.Tensor], batch: dict[str, torch.Tensor]
                   ) -> torch.Tensor:
    return stacked_rating_losses(template, params, buffers["reg"], batch)


#: Built-in families whose stacked loss is written out (no vmap, no module calls per step:
#: on the CPU those cost more than a cohort's arithmetic), each trial's loss bit for bit
#: its family loss alone.
_STACKED = {"rating_mf": _rating_losses}

_logged: set[tuple[str, str]] = set()


#: ``fuse = "auto"`` on a CPU: the largest cohort ``bench/fusion.py`` measured, and the fastest
#: in trial-epochs per second for each of its three models (16 demo rating models 5.43x the
#: single hops', of mixed sizes 3.36x, MLPs 2.94x; 8 of them 4.10x, 2.80x, 2.29x).
CPU_FUSE = 16
#: The most trials one cohort fuses (the bound of ``fuse``).
MAX_FUSE = 64
#: ``fuse = "auto"`` on a GPU: its members' weights, gradients and two optimizer moments
#: (float32: 16 bytes a parameter) in at most this share of the device's memory, the rest
#: left to padding to the largest member, activations and the allocator.
GPU_MEMORY_SHARE = 0.25
BYTES_PER_PARAMETER = 16


def fuse_limit(fuse: int | str, *, device: torch.device, parameters: int | None = None,
               memory: int | None = None) -> int:
    """The most trials one cohort fuses: ``fuse`` where it is a number; for "auto",
    ``CPU_FUSE`` on a CPU, and on a GPU as many trials of ``parameters`` each as fit in
    ``GPU_MEMORY_SHARE`` of its ``memory`` bytes (1 to ``MAX_FUSE``)."""
    if fuse != "auto":
        return int(fuse)
    if device.type != "cuda":
        return CPU_FUSE
    if not parameters or not memory:
        raise ValueError("fuse = 'auto' on a GPU needs the model's parameters and the "
                         "device's memory")
    fit = int(memory * GPU_MEMORY_SHARE) // (parameters * BYTES_PER_PARAMETER)
    return max(1, min(MAX_FUSE, fit))


@dataclass(frozen=True)
class Unfusable:
    """Why trials cannot train as one fused model (they train one by one)."""

    reason: str


def cohort_key(family: Family, params: Mapping[str, Any]) -> tuple[Any, ...] | Unfusable:
    """What trials must share to fuse with a trial of ``params``; Unfusable with the reason
    where the trial fuses with none."""
    full = family.params(params)
    if family.name == "rating_mf":
        return ("rating_mf",)
    if family.name == "mlp":
        if float(full["dropout"]) != 0:
            return Unfusable("dropout draws per-trial random masks that a fused forward "
                             "cannot reproduce")
        return ("mlp", int(full["layers"]), str(full["activation"]))
    model_params = {k: v for k, v in full.items() if k not in OPTIMIZER_PARAMS}
    return (family.name, json.dumps(model_params, sort_keys=True, default=str))


def log_unfused(family: Family, unfusable: Unfusable) -> None:
    """Log, once per process and family, that its trials train unfused, and why."""
    key = (family.name, unfusable.reason)
    if key not in _logged:
        _logged.add(key)
        log.warning("family %r trains its trials unfused: %s", family.name, unfusable.reason)


class _LossOf(nn.Module):
    """The family's training loss of ``model`` as a module, so ``functional_call`` swaps the
    model's tensors for one trial's during forward and regularisation alike."""

    def __init__(self, family: Family, model: nn.Module) -> None:
        super().__init__()
        self.family = family
        self.model = model

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.family.loss(self.model, batch)


def _padded(tensor: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """tensor in the leading corner of zeros of shape."""
    if tensor.shape == shape:
        return tensor.detach().clone()
    out = torch.zeros(shape, dtype=tensor.dtype, device=tensor.device)
    out[tuple(slice(0, n) for n in tensor.shape)] = tensor.detach()
    return out


class FusedModel:
    """N trials' models as stacked tensors and one batched loss.

    ``params`` are leaf tensors ``(N, *padded shape)`` with gradients; ``losses``
    takes a batch whose tensors are stacked ``(N, rows, ...)`` (trial i's own
    batch in row i) and returns the N losses. ``member(name, i)`` is trial i's
    own-shaped view of a parameter or buffer; ``write_back`` copies every trial's
    slices into its own model in place, so a single-trial optimizer built on that
    model still holds its parameters.
    """

    def __init__(self, family: Family, models: Sequence[nn.Module], template: nn.Module,
                 per_trial: Mapping[str, str]) -> None:
        self.family = family
        self.trials = len(models)
        shapes = {name: t.shape for name, t in (*template.named_parameters(),
                                                 *template.named_buffers())}
        self._shapes = [{name: t.shape for name, t in (*m.named_parameters(),
                                                        *m.named_buffers())} for m in models]
        padded = []
        for model in models:
            copy = {name: _padded(t, shapes[name]) for name, t in (*model.named_parameters(),
                                                                  *model.named_buffers())}
            padded.append(copy)
        like = next(iter(padded[0].values()))
        param_names = [name for name, _ in template.named_parameters()]
        self.params = {name: torch.stack([p[name] for p in padded]).requires_grad_()
                       for name in param_names}
        self.buffers = {name: torch.stack([p[name] for p in padded])
                        for name, _ in template.named_buffers() if name not in per_trial}
        for attribute in per_trial:  # plain floats of the model, carried per trial
            values = [float(getattr(m, attribute)) for m in models]
            self.buffers[attribute] = torch.tensor(values, dtype=torch.float64).to(
                like.device, like.dtype)
        self._loss = _LossOf(family, template)
        self._stacked = _STACKED.get(family.name)
        # functional_call unties shared tensors on every call (walking the modules): only a
        # template that shares a parameter or buffer between two names needs it
        self._tied = any(
            len(list(named(remove_duplicate=False))) != len(list(named()))
            for named in (template.named_parameters, template.named_buffers))
        self._batched = vmap(self._one, randomness="error")

    def _one(self, params: dict[str, torch.Tensor], buffers: dict[str, torch.Tensor],
             batch: dict[str, torch.Tensor]) -> torch.Tensor:
        tensors = {_PREFIX + k: v for k, v in (*params.items(), *buffers.items())}
        return functional_call(self._loss, tensors, (batch,), tie_weights=self._tied)

    def losses(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The N trials' losses of batch (tensors stacked along axis 0, one row per trial)."""
        if self._stacked is not None:
            return self._stacked(self._loss.model, self.params, self.buffers, batch)
        return self._batched(self.params, self.buffers, batch)

    def parameters(self) -> list[torch.Tensor]:
        return list(self.params.values())

    def member(self, name: str, trial: int) -> torch.Tensor:
        """Trial ``trial``'s own-shaped view of stacked parameter or buffer ``name``."""
        stacked = self.params.get(name)
        if stacked is None:
            stacked = self.buffers[name]
        own = self._shapes[trial][name]
        return stacked[trial][tuple(slice(0, n) for n in own)]

    def padding(self, name: str, trial: int) -> torch.Tensor:
        """A mask of trial ``trial``'s padded elements of stacked parameter ``name``."""
        mask = torch.ones(self.params[name].shape[1:], dtype=torch.bool)
        mask[tuple(slice(0, n) for n in self._shapes[trial][name])] = False
        return mask

    def pad(self, name: str, tensor: torch.Tensor) -> torch.Tensor:
        """A trial's own-shaped tensor of parameter ``name`` (its weights or optimizer state)
        in the leading corner of zeros of the cohort's padded shape."""
        return _padded(tensor, self.params[name].shape[1:])

    def cut(self, name: str, trial: int, tensor: torch.Tensor) -> torch.Tensor:
        """A padded tensor of parameter ``name`` cut back to trial ``trial``'s own shape."""
        return tensor[tuple(slice(0, n) for n in self._shapes[trial][name])].clone()

    @torch.no_grad()
    def write_back(self, models: Sequence[nn.Module]) -> None:
        """Copy each trial's slices into its own model, in place."""
        for i, model in enumerate(models):
            for name, t in (*model.named_parameters(), *model.named_buffers()):
                if name in self.params or name in self.buffers:
                    t.copy_(self.member(name, i))


def _template(family: Family, params: Sequence[Mapping[str, Any]],
              meta: Mapping[str, Any]) -> nn.Module:
    """A model of the cohort's (padded) shape on the meta device: shapes only, no data."""
    largest = dict(params[0])
    for name in _PADDED.get(family.name, ()):
        largest[name] = max(int(family.params(p)[name]) for p in params)
    with torch.device("meta"):
        return family.build(largest, meta)


def fuse(family: Family, params: Sequence[Mapping[str, Any]], models: Sequence[nn.Module],
         meta: Mapping[str, Any], probe: dict[str, torch.Tensor] | None = None
         ) -> FusedModel | Unfusable:
    """The trials' models (built from ``params``, trained or not) as one FusedModel.

    All trials must share ``cohort_key``. ``probe``, a few rows of training data,
    is run through the fused loss once (without gradients, on copies of the
    buffers) to find a factory model's forward that ``vmap`` cannot run.
    """
    keys = {repr(cohort_key(family, p)) for p in params}
    if len(keys) != 1:
        raise ValueError(f"trials of different cohorts cannot fuse: {sorted(keys)}")
    key = cohort_key(family, params[0])
    if isinstance(key, Unfusable):
        return key
    template = _template(family, params, meta)
    per_trial = _PER_TRIAL.get(family.name, {})
    for attribute in per_trial:
        delattr(template, attribute)
        template.register_buffer(attribute, torch.zeros(()), persistent=False)
    fused = FusedModel(family, models, template, per_trial)
    if probe is not None:
        saved = {k: v.clone() for k, v in fused.buffers.items()}
        try:
            with torch.no_grad():
                fused.losses({k: torch.stack([v] * fused.trials) for k, v in probe.items()})
        except Exception as exc:  # noqa: BLE001 - any failure of vmap means: train unfused
            first = (str(exc).strip().splitlines() or [""])[0][:300]
            return Unfusable(f"torch.func.vmap cannot run its forward "
                             f"({type(exc).__name__}: {first})")
        fused.buffers = saved
    return fused
