"""The error model of each kernel: its formula, operation for operation, on ``Bounded`` values.

Each function follows its ``kernels.reference`` twin in the same order and
returns, per output, the bound on |ours - theirs| (float64, element by element)
that ``compare_by_bound`` takes. The inputs given are theirs (the side the
comparison calls ``want``); ``spreads`` says how far ours may differ (the
previous steps' bounds, a measured gradient difference), absent meaning bitwise
equal. ``fma=True`` is for comparisons with ``torch.optim``, whose lerp, addcmul
and add-with-alpha fuse a product into the following add on CPUs with FMA.

What this gives, to first order in eps, for equal inputs (one kernel step
against the reference):

* AdamW. The moments use only correctly rounded operations: bound 0. In
  ``p' = p * decay + (nss * m) / (sqrt(v) / bc2 + eps)`` the sqrt may round
  apart (2 eps of it), the division by the host scalar bc2 too (3 eps), the
  sum with eps then rounds once more (1 eps of denom), and so does the quotient
  (1 eps of the update): 7 eps of |update| (update = lr * m_hat / denom, so
  lr * |update| in the issue's words); the product p * decay (where lr * wd *
  |param| lives) has equal inputs, and the final sum may round apart once, eps
  of |p * decay + update|. So |got - want| <= eps * (7 |update| + |p'|), with
  |p'| <= |p * decay| + |update|: a few ulps of the operands, whatever the
  cancellation leaves of p'.
* SGD: every operation rounds correctly, so the bound is 0 (bit for bit).
* scaled_sigmoid: exp may differ by 4 eps of e; through the scaling and the
  quotient that is at most 4 eps of y for x >= 0 and 9 eps of y below.
* scale: one correctly rounded product: 0.
"""

from __future__ import annotations

import torch

from hoptune.kernels._error_model import (
    CORRECT,
    FUSED,
    SCALAR_DIVISION,
    Bounded,
    ErrorModel,
)
from hoptune.kernels.reference import AdamWScalars, SGDScalars

__all__ = [
    "adamw_bound",
    "scale_bound",
    "scaled_sigmoid_bound",
    "scaled_sigmoid_grad_bound",
    "sgd_bound",
]

Spreads = dict[str, torch.Tensor]


def adamw_bound(
    param: torch.Tensor,
    grad: torch.Tensor,
    exp_avg: torch.Tensor,
    exp_avg_sq: torch.Tensor,
    max_exp_avg_sq: torch.Tensor | None,
    scalars: AdamWScalars,
    *,
    maximize: bool = False,
    spreads: Spreads | None = None,
    fma: bool = False,
) -> dict[str, torch.Tensor]:
    """Bounds on param, exp_avg, exp_avg_sq (and max_exp_avg_sq) after one AdamW step."""
    model = ErrorModel(param.dtype)
    spreads = spreads or {}
    s = {k: model.rounded(v) for k, v in vars(scalars).items()}
    if fma and s["one_minus_beta1"] >= 0.5:
        raise ValueError("torch's lerp takes another formula for weights >= 0.5 (beta1 <= 0.5)")
    product = FUSED if fma else CORRECT
    p = model.input(param, spreads.get("param"))
    g = model.input(grad, spreads.get("grad"))
    m0 = model.input(exp_avg, spreads.get("exp_avg"))
    v0 = model.input(exp_avg_sq, spreads.get("exp_avg_sq"))
    if maximize:
        g = model.neg(g)
    m = model.lerp(m0, g, s["one_minus_beta1"], product)
    v = model.add(
        model.mul(v0, s["beta2"]), model.mul(model.mul(g, s["one_minus_beta2"]), g, product)
    )
    out = {"exp_avg": m.spread, "exp_avg_sq": v.spread}
    v_used = v
    if max_exp_avg_sq is not None:
        v_used = model.maximum(model.input(max_exp_avg_sq, spreads.get("max_exp_avg_sq")), v)
        out["max_exp_avg_sq"] = v_used.spread
    root = model.div(model.sqrt(v_used), s["bias_correction2_sqrt"], SCALAR_DIVISION)
    denom = model.add(root, s["eps"])
    if s["decay"] != 1:
        p = model.mul(p, s["decay"])
    p = model.add(p, model.div(model.mul(m, s["neg_step_size"]), denom))
    out["param"] = p.spread
    return out


def sgd_bound(
    param: torch.Tensor,
    grad: torch.Tensor,
    momentum_buffer: torch.Tensor | None,
    scalars: SGDScalars,
    *,
    nesterov: bool,
    first_step: bool,
    maximize: bool = False,
    spreads: Spreads | None = None,
    fma: bool = False,
) -> dict[str, torch.Tensor]:
    """Bounds on param (and momentum_buffer, with momentum) after one SGD step."""
    model = ErrorModel(param.dtype)
    spreads = spreads or {}
    s = {k: model.rounded(v) for k, v in vars(scalars).items()}
    product = FUSED if fma else CORRECT
    p = model.input(param, spreads.get("param"))
    g = model.input(grad, spreads.get("grad"))
    if maximize:
        g = model.neg(g)
    if s["weight_decay"] != 0:
        g = model.add(g, model.mul(p, s["weight_decay"], product))
    out = {}
    if s["momentum"] != 0:
        if first_step:
            buf = g
        else:
            buf0 = model.input(momentum_buffer, spreads.get("momentum_buffer"))
            buf = model.add(
                model.mul(buf0, s["momentum"]), model.mul(g, s["one_minus_dampening"], product)
            )
        out["momentum_buffer"] = buf.spread
        g = model.add(g, model.mul(buf, s["momentum"], product)) if nesterov else buf
    out["param"] = model.add(p, model.mul(g, s["neg_lr"], product)).spread
    return out


def _exp_minus_abs(model: ErrorModel, x: torch.Tensor) -> Bounded:
    return model.exp(model.neg(model.abs(model.input(x))))


def scaled_sigmoid_bound(x: torch.Tensor, scale: float) -> torch.Tensor:
    """Bound on scale * sigmoid(x) = (x >= 0 ? scale : scale * e) / (1 + e), e = exp(-|x|)."""
    model = ErrorModel(x.dtype)
    e = _exp_minus_abs(model, x)
    numerator = model.where(x >= 0, scale, model.mul(e, scale))
    return model.div(numerator, model.add(e, 1.0)).spread


def scaled_sigmoid_grad_bound(
    x: torch.Tensor, grad_out: torch.Tensor, scale: float
) -> torch.Tensor:
    """Bound on ((grad_out * scale) * e) / ((1 + e) * (1 + e)), e = exp(-|x|)."""
    model = ErrorModel(x.dtype)
    e = _exp_minus_abs(model, x)
    numerator = model.mul(model.mul(model.input(grad_out), scale), e)
    one_plus_e = model.add(e, 1.0)
    return model.div(numerator, model.mul(one_plus_e, one_plus_e)).spread


def scale_bound(values: torch.Tensor, coef: torch.Tensor | float) -> torch.Tensor:
    """Bound on values * coef: zero, one correctly rounded product of equal inputs."""
    model = ErrorModel(values.dtype)
    return model.mul(model.input(values), model.rounded(float(coef))).spread
