from __future__ import annotations

import inspect

import pytest
import torch

from hoptune import kernels


@pytest.mark.parametrize(
    ("name", "cls"),
    [
        ("fused_adamw", kernels.FusedAdamW),
        ("fused_sgd", kernels.FusedSGD),
        ("adamw", torch.optim.AdamW),
        ("sgd", torch.optim.SGD),
    ],
)
def test_builds_each_optimizer_by_name(name, cls) -> None:
    p = torch.zeros(2, requires_grad=True)
    optimizer = kernels.make_optimizer(name, [p], lr=0.5)
    assert type(optimizer) is cls
    assert optimizer.param_groups[0]["lr"] == 0.5


def test_unknown_name_is_a_clear_error() -> None:
    with pytest.raises(ValueError) as info:
        kernels.make_optimizer("adam", [torch.zeros(1, requires_grad=True)])
    assert str(info.value) == (
        "unknown optimizer 'adam': expected one of 'adamw', 'fused_adamw', 'fused_sgd', 'sgd'"
    )


def test_unknown_hyperparameter_is_a_clear_error() -> None:
    p = [torch.zeros(1, requires_grad=True)]
    with pytest.raises(ValueError) as info:
        kernels.make_optimizer("fused_sgd", p, betas=(0.9, 0.9))
    assert str(info.value) == (
        "optimizer 'fused_sgd' takes no hyperparameter 'betas'; "
        "it takes lr, momentum, dampening, weight_decay, nesterov, maximize"
    )


@pytest.mark.parametrize(
    ("ours", "theirs"),
    [(kernels.FusedAdamW, torch.optim.AdamW), (kernels.FusedSGD, torch.optim.SGD)],
)
def test_constructor_arguments_and_defaults_are_torchs(ours, theirs) -> None:
    def arguments(cls) -> dict[str, object]:
        return {
            name: (p.kind, p.default)
            for name, p in inspect.signature(cls.__init__).parameters.items()
            if name not in ("foreach", "capturable", "differentiable", "fused")
        }

    assert arguments(ours) == arguments(theirs)
