"""The .cuh math built for the host with gcc matches the torch reference within the error model.

Element by element, each output within the bound that kernels.adamw_bound and its
siblings derive from the operands (correct code rounds apart by that much at most).
"""

from __future__ import annotations

import math
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

from hoptune import kernels
from hoptune.kernels import reference
from hoptune.kernels._multi_tensor import MAX_CHUNKS, MIN_CHUNK_SHIFT, pointer_table
from hoptune.kernels.reference import AdamWScalars, SGDScalars

HARNESS = Path(__file__).with_name("host_harness.c")
HEADERS = Path(kernels.__file__).parent
N = 4096
#: The last CANCELLING elements of the optimizer tests are cancellation cases made on
#: purpose: ordinary inputs, and a param at (or next to) the root of the step's
#: update, so that param + lr * update (nearly) cancels.
CANCELLING = 512
NUMPY = {torch.float32: np.float32, torch.float64: np.float64}


# one test process runs them all: the module's fixture builds once (--dist loadgroup)
pytestmark = pytest.mark.xdist_group("host_build")


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> dict[torch.dtype, Path]:
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("gcc is not installed: the host build of the .cuh math cannot be made")
    build = tmp_path_factory.mktemp("host_harness")
    executables = {}
    for dtype, flag in ((torch.float32, 0), (torch.float64, 1)):
        exe = build / f"host_harness_{flag}"
        compiled = subprocess.run(
            [gcc, "-std=c99", "-O2", "-ffp-contract=off", "-Wall", "-Wextra", "-Werror",
             f"-DHT_DOUBLE={flag}", "-I", str(HEADERS), "-o", str(exe), str(HARNESS), "-lm"],
            capture_output=True,
            text=True,
        )
        assert compiled.returncode == 0, compiled.stderr
        executables[dtype] = exe
    return executables


def awkward(seed: int, dtype: torch.dtype, *, nonnegative: bool = False) -> torch.Tensor:
    """N values mixing ordinary, zero, huge, tiny (down to subnormal), round and non-finite ones."""
    g = torch.Generator().manual_seed(seed)
    info = torch.finfo(dtype)
    kind = torch.randint(0, 6, (N,), generator=g)
    u = torch.rand(N, generator=g, dtype=torch.float64)
    top, bottom = math.log10(info.max), math.log10(info.smallest_normal)
    choices = [
        torch.randn(N, generator=g, dtype=torch.float64),
        torch.zeros(N, dtype=torch.float64),
        10 ** (top - 10 + 10 * u),
        10 ** (bottom - 6 + 16 * u),
        10 ** (-8 + 16 * u),
        torch.randint(-8, 9, (N,), generator=g).double() / 4,
    ]
    values = torch.zeros(N, dtype=torch.float64)
    for k, choice in enumerate(choices):
        values = torch.where(kind == k, choice, values)
    sign = torch.where(torch.rand(N, generator=g) < 0.5, -1.0, 1.0).double()
    values = values * sign
    if nonnegative:
        values = values.abs()
    values[:3] = torch.tensor([math.inf, math.nan, -0.0 if not nonnegative else 0.0])
    return values.to(dtype)


def run(
    exe: Path,
    workdir: Path,
    kernel: str,
    scalars: tuple[float, ...],
    inputs: dict[str, torch.Tensor],
    outputs: list[str],
    n: int | None = None,
) -> dict[str, torch.Tensor]:
    """Run the harness on inputs; n (the loop length) defaults to the inputs' size."""
    workdir.mkdir()
    np.asarray(scalars, dtype=np.float64).tofile(workdir / "scalars.bin")
    for name, tensor in inputs.items():
        tensor.numpy().tofile(workdir / f"{name}.bin")
    n = next(iter(inputs.values())).numel() if n is None else n
    done = subprocess.run([str(exe), kernel, str(n), str(workdir)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    dtype = next(iter(inputs.values())).dtype
    return {
        name: torch.from_numpy(np.fromfile(workdir / f"{name}.out.bin", dtype=NUMPY[dtype]))
        for name in outputs
    }


def ordinary(seed: int, n: int, *, nonnegative: bool = False) -> torch.Tensor:
    """n float64 values of either sign and magnitudes from 1e-3 to 1e3."""
    g = torch.Generator().manual_seed(seed)
    values = torch.randn(n, generator=g, dtype=torch.float64)
    values = values * 10 ** (6 * torch.rand(n, generator=g, dtype=torch.float64) - 3)
    return values.abs() if nonnegative else values


def with_cancellation(
    inputs: dict[str, torch.Tensor],
    step: Callable[[dict[str, torch.Tensor]], torch.Tensor],
    seed: int,
) -> dict[str, torch.Tensor]:
    """inputs whose last CANCELLING elements are ordinary, with a param that cancels.

    The step's new param is affine in the old one, p' = a p + b (the other inputs
    fixed), so step (the reference, run in float64) at p = 0 and p = 1 gives the
    root -b / a; the params are set to the root times 1 + d, with d from exactly 0
    to 1e-1, then rounded to the dtype: p' is a (near) cancellation of p and the update.
    """
    tail = slice(N - CANCELLING, N)
    out = {k: v.clone() for k, v in inputs.items()}
    for i, (name, tensor) in enumerate(out.items()):
        tensor[tail] = ordinary(seed + i, CANCELLING, nonnegative="sq" in name).to(tensor.dtype)
    tail64 = {k: v[tail].double() for k, v in out.items()}
    at = [step(tail64 | {"param": torch.full((CANCELLING,), p, dtype=torch.float64)})
          for p in (0.0, 1.0)]
    root = -at[0] / (at[1] - at[0])
    near = torch.tensor([0.0, 2.0**-40, -(2.0**-30), 2.0**-22, -(2.0**-20), 1e-4, -1e-2, 1e-1])
    out["param"][tail] = (root * (1 + near.double().repeat(CANCELLING // len(near)))).to(
        out["param"].dtype
    )
    return out


def assert_cancels(inputs: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> None:
    """Most of the cancellation cases leave less than 1e-3 of |param|."""
    tail = slice(N - CANCELLING, N)
    small = want["param"][tail].abs() < 1e-3 * inputs["param"][tail].abs()
    assert int(small.sum()) >= CANCELLING // 2


DTYPES = [torch.float32, torch.float64]

ADAMW_KEYS = ("lr", "beta1", "beta2", "eps", "weight_decay", "step", "amsgrad", "maximize")
ADAMW_CASES = [
    dict(zip(ADAMW_KEYS, values, strict=True))
    for values in [
        (1e-3, 0.9, 0.999, 1e-8, 1e-2, 1, 0, 0),
        (1e-2, 0.9, 0.999, 1e-8, 0.0, 10, 1, 0),
        (0.5, 0.8, 0.99, 1e-6, 0.1, 1000, 1, 1),
        (1e-4, 0.0, 0.0, 0.0, 0.0, 3, 0, 1),
    ]
]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", ADAMW_CASES, ids=str)
def test_adamw(harness, tmp_path, within_bound, dtype, case) -> None:
    case = dict(case)
    amsgrad, maximize = case.pop("amsgrad"), case.pop("maximize")
    scalars = AdamWScalars.for_step(**case)

    def step(t: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        t = {k: v.clone() for k, v in t.items()}
        reference.adamw_step_(
            t["param"], t["grad"], t["exp_avg"], t["exp_avg_sq"],
            t["max_exp_avg_sq"] if amsgrad else None, scalars, maximize=bool(maximize),
        )
        return t

    inputs = with_cancellation({
        "param": awkward(1, dtype),
        "grad": awkward(2, dtype),
        "exp_avg": awkward(3, dtype),
        "exp_avg_sq": awkward(4, dtype, nonnegative=True),
        "max_exp_avg_sq": awkward(5, dtype, nonnegative=True),
    }, lambda t: step(t)["param"], seed=20)
    names = ["param", "exp_avg", "exp_avg_sq"] + (["max_exp_avg_sq"] if amsgrad else [])
    got = run(harness[dtype], tmp_path / "run", "adamw",
              (*scalars.as_tuple(), amsgrad, maximize), inputs, names)
    want = step(inputs)
    bound = kernels.adamw_bound(
        inputs["param"], inputs["grad"], inputs["exp_avg"], inputs["exp_avg_sq"],
        inputs["max_exp_avg_sq"] if amsgrad else None, scalars, maximize=bool(maximize),
    )
    for name in names:
        within_bound(got[name], want[name], bound[name], kernel=f"adamw.cuh {name} (one step)",
                     inputs=inputs)
    assert_cancels(inputs, want)


SGD_KEYS = ("lr", "weight_decay", "momentum", "dampening", "nesterov", "first_step", "maximize")
SGD_CASES = [
    dict(zip(SGD_KEYS, values, strict=True))
    for values in [
        (0.1, 0.0, 0.0, 0.0, 0, 0, 0),
        (0.01, 1e-2, 0.9, 0.0, 1, 0, 0),
        (0.5, 1e-4, 0.9, 0.1, 0, 1, 1),
        (1e-3, 0.1, 0.5, 0.5, 0, 0, 0),
    ]
]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", SGD_CASES, ids=str)
def test_sgd(harness, tmp_path, within_bound, dtype, case) -> None:
    case = dict(case)
    flags = (case.pop("nesterov"), case.pop("first_step"), case.pop("maximize"))
    scalars = SGDScalars.for_group(**case)
    options = {"nesterov": bool(flags[0]), "first_step": bool(flags[1]),
               "maximize": bool(flags[2])}
    momentum = case["momentum"] != 0

    def step(t: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        t = {k: v.clone() for k, v in t.items()}
        reference.sgd_step_(t["param"], t["grad"], t["momentum_buffer"] if momentum else None,
                            scalars, **options)
        return t

    inputs = with_cancellation({
        "param": awkward(6, dtype),
        "grad": awkward(7, dtype),
        "momentum_buffer": awkward(8, dtype),
    }, lambda t: step(t)["param"], seed=30)
    names = ["param", "momentum_buffer"] if momentum else ["param"]
    got = run(harness[dtype], tmp_path / "run", "sgd", (*scalars.as_tuple(), *flags), inputs, names)
    want = step(inputs)
    bound = kernels.sgd_bound(inputs["param"], inputs["grad"],
                              inputs["momentum_buffer"] if momentum else None, scalars, **options)
    for name in names:
        within_bound(got[name], want[name], bound[name], kernel=f"sgd.cuh {name} (one step)",
                     inputs=inputs)
    assert_cancels(inputs, want)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("scale", [1.0, 5.0, 1e-3])
def test_scaled_sigmoid_and_its_gradient(harness, tmp_path, within_bound, dtype, scale) -> None:
    x = awkward(9, dtype)
    x[3:6] = torch.tensor([-math.inf, 88.0, -104.0])  # saturation, and a subnormal exp in float32
    grad_out = awkward(10, dtype)
    got = run(harness[dtype], tmp_path / "forward", "scaled_sigmoid", (scale,), {"x": x}, ["y"])
    within_bound(got["y"], reference.scaled_sigmoid(x, scale),
                 kernels.scaled_sigmoid_bound(x, scale),
                 kernel="scaled_sigmoid.cuh (one call)", inputs={"x": x})
    got = run(harness[dtype], tmp_path / "backward", "scaled_sigmoid_grad", (scale,),
              {"x": x, "grad_out": grad_out}, ["grad_x"])
    within_bound(got["grad_x"], reference.scaled_sigmoid_grad(x, grad_out, scale),
                 kernels.scaled_sigmoid_grad_bound(x, grad_out, scale),
                 kernel="scaled_sigmoid_grad (one call)", inputs={"x": x, "grad_out": grad_out})


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("coef", [1.0, 0.37, 1e-20, 0.0])
def test_scale(harness, tmp_path, within_bound, dtype, coef) -> None:
    values = awkward(11, dtype)
    got = run(harness[dtype], tmp_path / "run", "scale", (coef,), {"values": values}, ["values"])
    want = values.clone()
    reference.scale_(want, torch.tensor(coef, dtype=dtype))
    within_bound(got["values"], want, kernels.scale_bound(values, coef),
                 kernel="scale.cuh (one call)", inputs={"values": values})


@pytest.mark.parametrize("sizes", [(3, 0, 7, 1, 0, 29, 64, 65), (40_000, 1, 3) * 60],
                         ids=["small", "many-chunks"])
def test_chunk_table_finds_each_elements_tensor(harness, tmp_path, sizes) -> None:
    tensors = [torch.zeros(n) for n in sizes]
    table = pointer_table({"values": tensors}, torch.device("cpu"))
    kept = [j for j, n in enumerate(sizes) if n > 0]
    assert table.n_tensors == len(kept)
    assert len(table.chunks) << table.chunk_shift == table.size
    assert len(table.chunks) <= MAX_CHUNKS
    # the smallest chunk (a warp) unless it would take more than MAX_CHUNKS chunks:
    # 60 * (1250 + 1 + 1) = 75,120 chunks of 32, 37,620 of 64
    assert table.chunk_shift == (MIN_CHUNK_SHIFT if len(sizes) < 10 else 6)
    inputs = {"starts": table.starts, "sizes": table.sizes, "chunks": table.chunks}
    scalars = (table.chunk_shift, table.n_tensors, len(table.chunks))
    got = run(harness[torch.float32], tmp_path / "run", "chunk_tensor", scalars, inputs, [],
              n=table.size)
    tensor = torch.from_numpy(np.fromfile(tmp_path / "run" / "tensor.out.bin", dtype=np.int64))
    assert got == {}
    # every element of every non-empty tensor is found once, in its own tensor's order;
    # every other index of the launch is padding
    for t, j in enumerate(kept):
        owned = (tensor == t).nonzero().flatten()
        assert len(owned) == sizes[j]
        assert torch.equal(owned, int(table.starts[t]) + torch.arange(sizes[j]))
        assert int(table.starts[t]) % (1 << table.chunk_shift) == 0
        assert table.rows["values"][t] == tensors[j].data_ptr()
    assert int((tensor == -1).sum()) == table.size - sum(sizes)


def test_a_step_reuses_the_table_while_its_tensors_stay_where_they_are() -> None:
    cpu = torch.device("cpu")
    params, grads = [torch.zeros(40), torch.zeros(3)], [torch.ones(40), torch.ones(3)]
    table = pointer_table({"params": params, "grads": grads}, cpu)
    assert pointer_table({"params": params, "grads": grads}, cpu) is table
    grads[1] = torch.ones(3)  # a new gradient tensor elsewhere: a new table
    moved = pointer_table({"params": params, "grads": grads}, cpu)
    assert moved is not table
    assert moved.rows["grads"].tolist() == [g.data_ptr() for g in grads]
    assert moved.chunks.tolist() == [0, 0, 1] and moved.size == 3 << MIN_CHUNK_SHIFT
