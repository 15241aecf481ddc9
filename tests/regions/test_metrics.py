"""The built-in metrics against independent implementations (numpy, scikit-learn)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.metrics import log_loss, roc_auc_score

from hoptune.core import ConfigError
from hoptune.regions import get_family
from hoptune.regions._metrics import METRICS


def _classes(n: int = 300, k: int = 3):  # noqa: ANN202
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(n, k, generator=g, dtype=torch.float64)
    target = torch.randint(0, k, (n,), generator=g)
    return logits, target


def test_regression_metrics_are_the_errors_root_mean_square_and_mean_absolute() -> None:
    g = torch.Generator().manual_seed(1)
    out, y = torch.randn(500, generator=g), torch.randn(500, generator=g)
    error = (out.double() - y.double()).numpy()
    # float64 sums of 500 terms: agreement to a few ulps of the result
    assert float(METRICS["rmse"].compute(out, y)) == pytest.approx(
        np.sqrt(np.mean(error**2)), rel=1e-12)
    assert float(METRICS["mae"].compute(out, y)) == pytest.approx(np.mean(np.abs(error)),
                                                                 rel=1e-12)


@pytest.mark.parametrize("k", [2, 3])
def test_classification_metrics_agree_with_scikit_learn(k: int) -> None:
    logits, target = _classes(k=k)
    p = logits.softmax(-1).numpy()
    y = target.numpy()
    # torchmetrics returns accuracy in float32: one rounding, 2**-24 relative
    assert float(METRICS["accuracy"].compute(logits, target)) == pytest.approx(
        np.mean(p.argmax(1) == y), rel=2**-24)
    assert float(METRICS["log_loss"].compute(logits, target)) == pytest.approx(
        log_loss(y, p, labels=list(range(k))), rel=1e-9)
    expected = roc_auc_score(y, p[:, 1]) if k == 2 else roc_auc_score(y, p, multi_class="ovr")
    # torchmetrics computes in float32: a few float32 ulps of AUC
    assert float(METRICS["auc"].compute(logits, target)) == pytest.approx(expected, abs=1e-5)


def test_a_region_may_choose_its_metric_and_direction(rating_region) -> None:
    family = get_family(rating_region(settings='metric = "mae"\n'))
    assert (family.metric_name, family.minimize) == ("mae", True)
    with pytest.raises(ConfigError) as caught:
        get_family(rating_region(settings='metric = "auc"\n'))
    assert str(caught.value) == (
        "region 'north': metric 'auc' is not for task 'rating' (it is for: classification)")
