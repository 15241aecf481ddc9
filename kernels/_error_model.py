"""How far two implementations of one formula may round apart: a running error analysis.

A kernel and its torch reference (or a fused optimizer and ``torch.optim``)
evaluate the same formula one operation at a time. Neither is exact, so they
are compared under a bound derived, element by element, from the magnitudes
of the operands that produced each result, in units of the dtype's epsilon.

The analysis carries each intermediate as a ``Bounded``: ``value``, the
formula evaluated in float64 on the inputs of one side ("theirs", the side the
comparison calls ``want``); ``error``, a bound on how far either side's
intermediate may lie from ``value``; ``spread``, a bound on how far the two
sides' intermediates may lie from each other. Inputs start with ``error ==
spread ==`` the given input spread (0 for bitwise equal inputs). Each operation
propagates both bounds exactly (the rules are in the methods below; products
of errors are kept, nothing is dropped as second order), then adds its own
rounding. An ulp of x is at most ``eps * |x| + tiny`` (tiny: the smallest
subnormal, so underflow is covered); an operation whose sides are each within
``each`` ulps of its exact result adds ``each`` ulps of ``|value| + error`` to
``error`` and twice that to ``spread``; the float64 evaluation of ``value``
adds its own ``each`` ulps of float64. Two refinements keep the bound tight:

* an operation that both sides round correctly (IEEE ``+ - * /``; the kernels
  are built without multiply-add contraction) gives bitwise equal results for
  bitwise equal inputs, so it adds nothing to ``spread`` while ``spread`` is 0;
* ``spread`` never exceeds ``2 * error`` (both sides lie within ``error`` of
  ``value``).

So ``|got - want| <= spread`` of the result is a bound that correct code in the
dtype meets; a cancellation (``param - lr * update`` with the two close) gets
an allowance of a few ulps of the operands, not of the small result.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

__all__ = [
    "CORRECT",
    "EXP",
    "FUSED",
    "SCALAR_DIVISION",
    "SQRT",
    "Bounded",
    "Comparison",
    "ErrorModel",
    "Rounding",
    "allclose_by_bound",
    "compare_by_bound",
]

EPS64 = torch.finfo(torch.float64).eps


@dataclass(frozen=True)
class Rounding:
    """How one operation rounds: each side is within ``each`` ulps of the exact result.

    ``deterministic``: both sides round correctly, so equal inputs give equal results.
    """

    each: float
    deterministic: bool


#: IEEE + - * / on every path: correctly rounded.
CORRECT = Rounding(0.5, True)
#: gcc's sqrtf and CUDA's sqrt round correctly; torch's CPU sqrt does not (within 0.75 ulp,
#: measured on AVX-512; it differs from sqrtf in about 15% of elements).
SQRT = Rounding(1.0, False)
#: CUDA's expf is within 2 ulps (CUDA C Programming Guide); glibc's and torch's within 1.
EXP = Rounding(2.0, False)
#: x / b for a host scalar b: torch on CUDA computes x * (1 / b), two roundings (eps + eps^2/4
#: relative, rounded up to 1.5 ulps); elsewhere the division rounds correctly.
SCALAR_DIVISION = Rounding(1.5, False)
#: A product that one side rounds and the other fuses into a multiply-add (torch.optim's lerp,
#: addcmul and add with alpha, on CPUs with FMA).
FUSED = Rounding(0.5, False)


@dataclass(frozen=True)
class Bounded:
    """An intermediate of the formula: its float64 value and the two bounds (see the module)."""

    value: torch.Tensor
    error: torch.Tensor
    spread: torch.Tensor

    def high(self) -> torch.Tensor:
        """The largest magnitude either side's intermediate may have."""
        return self.value.abs() + self.error


Operand = Bounded | float


class ErrorModel:
    """The arithmetic of ``Bounded`` values for formulas computed in one dtype."""

    def __init__(self, dtype: torch.dtype) -> None:
        info = torch.finfo(dtype)
        self.dtype = dtype
        self.eps = info.eps
        self.tiny = info.smallest_normal * info.eps
        self.smallest_normal = info.smallest_normal

    def input(self, tensor: torch.Tensor, spread: torch.Tensor | None = None) -> Bounded:
        """One side's input; the other's is within ``spread`` of it (bitwise equal if None)."""
        value = tensor.detach().to(torch.float64)
        spread = torch.zeros_like(value) if spread is None else spread.to(torch.float64)
        return Bounded(value, spread, spread)

    def constant(self, c: float) -> Bounded:
        """A host scalar as both sides use it: rounded to the dtype, exactly."""
        value = torch.tensor(c, dtype=self.dtype).to(torch.float64)
        zero = torch.zeros((), dtype=torch.float64)
        return Bounded(value, zero, zero)

    def rounded(self, c: float) -> float:
        """c rounded to the dtype, as the kernels and torch take host scalars."""
        return float(torch.tensor(c, dtype=self.dtype))

    def _bounded(self, x: Operand) -> Bounded:
        return x if isinstance(x, Bounded) else self.constant(x)

    def _terms(
        self, value: torch.Tensor, error: torch.Tensor, differs: torch.Tensor, rounding: Rounding
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """What one operation's rounding adds to error and to spread.

        ``error`` is the propagated error (both sides' exact results lie within it of
        value); ``differs`` says where the two sides' inputs may differ.
        """
        ulp = self.eps * (value.abs() + error) + self.tiny
        flip = 2 * rounding.each * ulp
        if rounding.deterministic:
            flip = torch.where(differs, flip, 0.0)
        return rounding.each * (ulp + EPS64 * value.abs()), flip

    def _round(
        self, value: torch.Tensor, error: torch.Tensor, spread: torch.Tensor, rounding: Rounding
    ) -> Bounded:
        """Add the rounding of one operation to the propagated bounds."""
        more_error, flip = self._terms(value, error, spread > 0, rounding)
        error = error + more_error
        return Bounded(value, error, torch.minimum(spread + flip, 2 * error))

    def lerp(
        self, start: Bounded, end: Bounded, weight: float, product: Rounding = CORRECT
    ) -> Bounded:
        """start + weight * (end - start), three rounded operations (a moving average).

        The operation-by-operation rules would count start twice (|1 + w| instead of
        |1 - w|), so a moving average's bound would grow by 1 + w a step where the
        average forgets by 1 - w. Here the inputs' errors are carried through the exact
        (1 - w) * start + w * end; the roundings of the difference (times w), of the
        product and of the sum are added as each operation makes them.
        """
        w = self.rounded(weight)
        differs = (start.spread + end.spread) > 0
        d_value, d_error = end.value - start.value, start.error + end.error
        d_more, d_flip = self._terms(d_value, d_error, differs, CORRECT)
        t_value, t_error = w * d_value, abs(w) * (d_error + d_more)
        t_more, t_flip = self._terms(t_value, t_error, differs | (d_flip > 0), product)
        value = start.value + t_value
        error = abs(1 - w) * start.error + abs(w) * (end.error + d_more) + t_more
        spread = abs(1 - w) * start.spread + abs(w) * (end.spread + d_flip) + t_flip
        return self._round(value, error, spread, CORRECT)

    def add(self, x: Operand, y: Operand, rounding: Rounding = CORRECT) -> Bounded:
        x, y = self._bounded(x), self._bounded(y)
        return self._round(x.value + y.value, x.error + y.error, x.spread + y.spread, rounding)

    def sub(self, x: Operand, y: Operand, rounding: Rounding = CORRECT) -> Bounded:
        x, y = self._bounded(x), self._bounded(y)
        return self._round(x.value - y.value, x.error + y.error, x.spread + y.spread, rounding)

    def mul(self, x: Operand, y: Operand, rounding: Rounding = CORRECT) -> Bounded:
        """|x'y' - xy| <= |x| e_y + |y| e_x + e_x e_y."""
        x, y = self._bounded(x), self._bounded(y)
        error = _times(x.value.abs(), y.error) + _times(y.value.abs(), x.error)
        error = error + _times(x.error, y.error)
        spread = _times(x.high(), y.spread) + _times(y.high(), x.spread)
        spread = spread + _times(x.spread, y.spread)
        return self._round(x.value * y.value, error, spread, rounding)

    def div(self, x: Operand, y: Operand, rounding: Rounding = CORRECT) -> Bounded:
        """|x'/y' - x/y| <= (e_x + |x/y| e_y) / (|y| - e_y); unbounded if y' may be 0."""
        x, y = self._bounded(x), self._bounded(y)
        value = x.value / y.value
        room = y.value.abs() - y.error
        error = _quotient(x.error + _times(value.abs(), y.error), room, x.error + y.error)
        largest = x.high() / room  # the largest |x / y| of either side
        spread = _quotient(
            x.spread + _times(largest, y.spread), room - y.spread, x.spread + y.spread
        )
        return self._round(value, error, spread, rounding)

    def sqrt(self, x: Bounded, rounding: Rounding = SQRT) -> Bounded:
        """|sqrt a - sqrt b| = |a - b| / (sqrt a + sqrt b), and at most sqrt |a - b|."""
        value = torch.sqrt(x.value)
        error = _sqrt_change(x.error, x.value.abs())
        spread = _sqrt_change(x.spread, (x.value.abs() - x.error).clamp(min=0), both=True)
        return self._round(value, error, spread, rounding)

    def exp(self, x: Bounded, rounding: Rounding = EXP) -> Bounded:
        """|exp a - exp b| <= exp(max(a, b)) * (1 - exp(-|a - b|)).

        Where the result may lie below the smallest normal number, either side may
        also return anything from zero to that number: CUDA's single-precision
        ``expf`` goes through a flush-to-zero power of two, so a subnormal result
        may come back as zero, while a CPU returns the subnormal (on an H100 the
        scaled sigmoid kernel at x = -100, scale 4, differed from torch by
        1.5e-43 = 4 exp(-100)).
        """
        value = torch.exp(x.value)
        error = torch.where(x.error > 0, value * torch.expm1(x.error), 0.0)
        top = torch.exp(x.value + x.error)
        spread = torch.where(x.spread > 0, top * -torch.expm1(-x.spread), 0.0)
        out = self._round(value, error, spread, rounding)
        flushed = torch.where(value - out.error < self.smallest_normal, self.smallest_normal, 0.0)
        return Bounded(value, out.error + flushed, out.spread + flushed)

    def maximum(self, x: Bounded, y: Bounded) -> Bounded:
        """Exact; |max(a, b) - max(c, d)| <= max(|a - c|, |b - d|)."""
        return Bounded(
            torch.maximum(x.value, y.value),
            torch.maximum(x.error, y.error),
            torch.maximum(x.spread, y.spread),
        )

    def neg(self, x: Bounded) -> Bounded:
        return Bounded(-x.value, x.error, x.spread)

    def abs(self, x: Bounded) -> Bounded:
        return Bounded(x.value.abs(), x.error, x.spread)

    def where(self, condition: torch.Tensor, x: Operand, y: Operand) -> Bounded:
        """Select; the condition must be the same on both sides (computed from exact inputs)."""
        x, y = self._bounded(x), self._bounded(y)
        return Bounded(
            torch.where(condition, x.value, y.value),
            torch.where(condition, x.error, y.error),
            torch.where(condition, x.spread, y.spread),
        )


def _times(a: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
    """a * e, where a zero error contributes nothing even against an infinite magnitude."""
    return torch.where(e == 0, 0.0, a * e)


def _quotient(numerator: torch.Tensor, room: torch.Tensor, any_error: torch.Tensor) -> torch.Tensor:
    """numerator / room; 0 when nothing is uncertain, unbounded when the divisor may vanish."""
    bounded = torch.where(room > 0, numerator / room, math.inf)
    return torch.where(any_error == 0, 0.0, bounded)


def _sqrt_change(e: torch.Tensor, low: torch.Tensor, both: bool = False) -> torch.Tensor:
    """How far sqrt moves when its argument (at least ``low``) moves by e.

    With one argument known to be ``low`` (``both`` False) the sum of the roots is at
    least sqrt(low); with both only known to be at least ``low`` it is 2 sqrt(low).
    """
    roots = torch.sqrt(low) * (2 if both else 1)
    near = torch.where(roots > 0, e / roots, math.inf)
    return torch.where(e == 0, 0.0, torch.minimum(near, torch.sqrt(e)))


@dataclass(frozen=True)
class Comparison:
    """got against want under a bound, element by element.

    Non-finite wants must be matched exactly (NaN by NaN); finite ones by a finite got
    within the bound. ``worst_ratio`` is the largest |got - want| / bound (0 / 0 counts
    0); at that element ``error_ulps`` and ``bound_ulps`` are the error and the bound in
    ulps of want. ``max_ulps`` is the largest error in ulps of want anywhere (large
    where want is a small result of a cancellation).
    """

    elements: int
    mismatches: int
    worst_ratio: float
    error_ulps: float
    bound_ulps: float
    max_ulps: float
    first_mismatches: tuple[int, ...]

    @property
    def ok(self) -> bool:
        return self.mismatches == 0


def compare_by_bound(got: torch.Tensor, want: torch.Tensor, bound: torch.Tensor) -> Comparison:
    """Compare got with want under bound (from the error model), element by element."""
    if got.shape != want.shape:
        raise ValueError(f"got has shape {tuple(got.shape)}, want {tuple(want.shape)}")
    got64 = got.detach().reshape(-1).to(torch.float64)
    want64 = want.detach().reshape(-1).to(torch.float64)
    bound = torch.broadcast_to(bound.to(torch.float64), want.shape).reshape(-1)
    finite = torch.isfinite(want64)
    diff = (got64 - want64).abs()
    same = (got64 == want64) | (got64.isnan() & want64.isnan())
    ok = torch.where(finite, torch.isfinite(got64) & (diff <= bound), same)
    bad = (~ok).nonzero().flatten()
    magnitude = want.detach().reshape(-1).abs()
    ulp = (torch.nextafter(magnitude, torch.full_like(magnitude, math.inf)) - magnitude).double()
    ratio = torch.where(diff == 0, 0.0, diff / bound)
    ratio = torch.where(finite, ratio, 0.0)
    ulps = torch.where(finite, diff / ulp, 0.0)
    if not ratio.numel():
        return Comparison(0, 0, 0.0, 0.0, 0.0, 0.0, ())
    worst = int(ratio.argmax())
    return Comparison(
        elements=want.numel(),
        mismatches=bad.numel(),
        worst_ratio=float(ratio[worst]),
        error_ulps=float(ulps[worst]),
        bound_ulps=float(torch.where(finite[worst], bound[worst] / ulp[worst], 0.0)),
        max_ulps=float(ulps.max()),
        first_mismatches=tuple(bad[:5].tolist()),
    )


def allclose_by_bound(got: torch.Tensor, want: torch.Tensor, bound: torch.Tensor) -> bool:
    """Whether got matches want within bound everywhere (see ``compare_by_bound``)."""
    return compare_by_bound(got, want, bound).ok
