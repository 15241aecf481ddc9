"""A planned step (``kernels._plan``) is bitwise the unplanned one, and holds only while it may.

Every test runs two copies of the same parameters through the same events, one
optimizer with its plans and one without (``planned = False``), on the kernel
path launched from the host build, and compares every parameter and state
tensor bit for bit.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
import torch

from hoptune import kernels
from hoptune.kernels import _dispatch, _multi_tensor
from tests.host_build import device_steps_beside

Event = Callable[[list[torch.Tensor], int], None]

OPTIMIZERS = {
    "adamw": lambda ps: kernels.FusedAdamW(ps, lr=1e-2, weight_decay=1e-2),
    "adamw-amsgrad-maximize": lambda ps: kernels.FusedAdamW(ps, lr=1e-2, amsgrad=True,
                                                            maximize=True),
    "sgd": lambda ps: kernels.FusedSGD(ps, lr=1e-2),
    "sgd-momentum": lambda ps: kernels.FusedSGD(ps, lr=1e-2, momentum=0.9, weight_decay=1e-3),
    "sgd-nesterov": lambda ps: kernels.FusedSGD(ps, lr=1e-2, momentum=0.9, nesterov=True),
}


def _params() -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(3)
    shapes = [(40, 3), (0,), (7,), (33,), (2, 2)]
    params = [torch.randn(s, generator=g, dtype=torch.float32) for s in shapes]
    params.append(torch.randn(6, generator=g, dtype=torch.complex64))
    return [p.requires_grad_() for p in params]


def _grads(params: list[torch.Tensor], step: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(100 + step)
    return [torch.randn(p.shape, generator=g, dtype=p.dtype) for p in params]


def _twins(make: Callable[[list[torch.Tensor]], torch.optim.Optimizer]):  # noqa: ANN202
    base = _params()
    planned = [p.detach().clone().requires_grad_() for p in base]
    unplanned = [p.detach().clone().requires_grad_() for p in base]
    a, b = make(planned), make(unplanned)
    b.planned = False
    return (planned, a), (unplanned, b)


def _assert_same(a: torch.optim.Optimizer, b: torch.optim.Optimizer,
                 pa: list[torch.Tensor], pb: list[torch.Tensor]) -> None:
    for x, y in zip(pa, pb, strict=True):
        assert torch.equal(x, y)
        sx, sy = a.state[x], b.state[y]
        assert sx.keys() == sy.keys()
        for key in sx:
            assert torch.equal(sx[key], sy[key]), key


def _step_both(a, b, pa, pb, step: int, event: Event | None = None) -> None:  # noqa: ANN001
    """Step ``a`` (planned) over ``pa`` and ``b`` over ``pb`` with step ``step``'s gradients,
    ``event`` done to each first."""
    for params in (pa, pb):
        for p, grad in zip(params, _grads(params, step), strict=True):
            p.grad = grad
        if event is not None:
            event(params, step)
    a.step()
    b.step()


def _run(make, steps: int, event: Event | None = None) -> tuple[torch.optim.Optimizer, ...]:  # noqa: ANN001
    (pa, a), (pb, b) = _twins(make)
    for step in range(steps):
        _step_both(a, b, pa, pb, step, event)
        _assert_same(a, b, pa, pb)
    return a, b


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_a_planned_step_is_bitwise_the_unplanned_step(kernel_path_on_cpu, name) -> None:
    a, b = _run(OPTIMIZERS[name], 6)
    assert a._plan(a.param_groups[0]) is not None  # the steps after the first were planned
    assert b._plan(b.param_groups[0]) is None


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_a_planned_step_builds_no_table_of_its_own_and_sorts_nothing(
        kernel_path_on_cpu, monkeypatch, name) -> None:
    calls = {"tables": 0, "splits": 0}
    table, split = _multi_tensor.pointer_table, _dispatch.split_by_path

    def counting_table(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        calls["tables"] += 1
        return table(*args, **kwargs)

    def counting_split(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        calls["splits"] += 1
        return split(*args, **kwargs)

    monkeypatch.setattr("hoptune.kernels._launches.pointer_table", counting_table)
    monkeypatch.setattr(_dispatch, "split_by_path", counting_split)
    params = _params()
    optimizer = OPTIMIZERS[name](params)
    for step in range(5):
        for p, grad in zip(params, _grads(params, step), strict=True):
            p.grad = grad
        optimizer.step()
    assert calls == {"tables": 1, "splits": 1}  # the first step's, then the plan's
    assert len(kernel_path_on_cpu.launches) == 5


def _lose_a_grad(params: list[torch.Tensor], step: int) -> None:
    if step in (2, 3):  # steps counts part ways: a plan cannot serve them any more
        params[2].grad = None


def _strided_grad(params: list[torch.Tensor], step: int) -> None:
    if step == 3:  # the reference path takes that parameter this step
        params[0].grad = params[0].grad.t().contiguous().t()


def _moved(params: list[torch.Tensor], step: int) -> None:
    if step == 3:
        params[3].data = params[3].data.clone()  # the parameter now lies elsewhere


@pytest.mark.parametrize("event", [_lose_a_grad, _strided_grad, _moved],
                         ids=["a-grad-missing", "a-strided-grad", "a-parameter-moved"])
@pytest.mark.parametrize("name", ["adamw-amsgrad-maximize", "sgd-momentum"])
def test_a_plan_that_no_longer_holds_is_not_used(kernel_path_on_cpu, name, event) -> None:
    _run(OPTIMIZERS[name], 7, event)


def test_loading_a_state_dict_drops_the_plans(kernel_path_on_cpu) -> None:
    (pa, a), (pb, b) = _twins(OPTIMIZERS["adamw"])
    for step in range(3):
        _step_both(a, b, pa, pb, step)
    a.load_state_dict(copy.deepcopy(b.state_dict()))  # torch's load keeps the tensors given
    assert a._plan(a.param_groups[0]) is None
    for step in range(3, 6):
        _step_both(a, b, pa, pb, step)
        _assert_same(a, b, pa, pb)


def test_a_step_tensor_replaced_by_hand_is_read_again(kernel_path_on_cpu) -> None:
    (pa, a), (pb, b) = _twins(OPTIMIZERS["adamw"])

    def replace_steps(params: list[torch.Tensor], step: int) -> None:
        if step == 3:
            opt = a if params is pa else b
            for p in params:
                opt.state[p]["step"] = torch.tensor(10.0)

    for step in range(5):
        _step_both(a, b, pa, pb, step, replace_steps)
        _assert_same(a, b, pa, pb)
    assert float(a.state[pa[0]]["step"]) == 12.0


def test_on_the_reference_path_nothing_is_planned() -> None:
    params = _params()
    optimizer = OPTIMIZERS["adamw"](params)
    for step in range(3):
        for p, grad in zip(params, _grads(params, step), strict=True):
            p.grad = grad
        optimizer.step()
    assert optimizer._plan(optimizer.param_groups[0]) is None


def test_host_work_only_takes_the_kernel_path_and_updates_nothing_while_it_lasts() -> None:
    params = _params()
    before = [p.detach().clone() for p in params]
    optimizer = OPTIMIZERS["adamw"](params)
    with kernels.host_work_only():
        for step in range(3):
            for p, grad in zip(params, _grads(params, step), strict=True):
                p.grad = grad
            optimizer.step()
        assert optimizer._plan(optimizer.param_groups[0]) is not None  # the kernel path's
        assert all(torch.equal(p, b) for p, b in zip(params, before, strict=True))
    optimizer.step()  # the reference path again: the parameters move
    assert not torch.equal(params[0], before[0])


def _grads_in_place(params: list[torch.Tensor], step: int) -> None:
    """Step ``step``'s gradients written into the tensors the parameters hold, as a captured
    backward writes them: their addresses stay."""
    for p, grad in zip(params, _grads(params, step), strict=True):
        p.grad.copy_(grad)


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_device_steps_are_bitwise_the_planned_steps_they_stand_for(kernel_path_on_cpu,
                                                                   name) -> None:
    (pa, a), (pb, b) = _twins(OPTIMIZERS[name])
    _step_both(a, b, pa, pb, 0)  # a's first step makes its plan
    for params in (pa, pb):
        _grads_in_place(params, 1)
    a.step()
    b.step()
    steps = a.device_steps(4)
    assert steps is not None
    kernel_path_on_cpu.launches.clear()
    # the step counts of the state too
    device_steps_beside(steps, b, (pa, pb), (_grads(pa, step) for step in range(2, 6)),
                        lambda: _assert_same(a, b, pa, pb))
    # AdamW's steps read their scalars from the table on the device; SGD's are the planned
    # launch itself; b's unplanned steps are launched from the host's scalars
    launched = [k for k, _ in kernel_path_on_cpu.launches]
    if name.startswith("adamw"):
        assert launched.count("ht_adamw_rows_float32") == 4
    else:
        assert launched.count("ht_sgd_float32") == 8
    for step in range(6, 8):  # and a's planned steps go on from the count the steps left
        _step_both(a, b, pa, pb, step)
        _assert_same(a, b, pa, pb)


def test_device_steps_need_a_plan_that_holds_on_the_kernel_path(kernel_path_on_cpu) -> None:
    params = _params()
    optimizer = OPTIMIZERS["adamw"](params)
    for p, grad in zip(params, _grads(params, 0), strict=True):
        p.grad = grad
    assert optimizer.device_steps(3) is None  # no step taken: nothing planned
    optimizer.step()
    assert optimizer.device_steps(3) is not None
    params[0].grad = params[0].grad.t().contiguous().t()  # a gradient the kernel cannot read
    assert optimizer.device_steps(3) is None
    unplanned = OPTIMIZERS["adamw"](params)
    unplanned.planned = False
    params[0].grad = params[0].grad.contiguous()
    unplanned.step()
    assert unplanned.device_steps(3) is None


def test_device_steps_are_none_on_the_reference_path() -> None:
    params = _params()
    optimizer = OPTIMIZERS["adamw"](params)
    for p, grad in zip(params, _grads(params, 0), strict=True):
        p.grad = grad
    optimizer.step()
    assert optimizer.device_steps(3) is None


def test_more_device_steps_than_prepared_are_refused(kernel_path_on_cpu) -> None:
    params = _params()
    optimizer = OPTIMIZERS["adamw"](params)
    for p, grad in zip(params, _grads(params, 0), strict=True):
        p.grad = grad
    optimizer.step()
    steps = optimizer.device_steps(2)
    for _ in range(2):
        steps.step()
        steps.counted()
    assert float(optimizer.state[params[0]]["step"]) == 3.0
    with pytest.raises(RuntimeError, match="the 2 steps prepared are all taken"):
        steps.counted()
