"""Warm start: which results of a region's previous study the optimizer is told.

The previous study of a region ran on older data, possibly with a different
space. Its results are a prior, not the truth: only the points that lie inside
the current space are kept, with finite values, and at most ``limit`` of them,
picked evenly over the ranking by value so that the surrogate still sees bad
regions as bad (keeping only the best would make everything unexplored look
good) and always sees the best one.

``propose`` tells these points to the model like the study's own results and
counts them towards its initial design: with at least ``n_initial_points`` of
them the random phase is skipped, and the first batch already maximises
expected improvement, which is high near the previous optimum.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from hoptune.tuner._space import Space

__all__ = ["select_prior", "study_prior"]

PRIOR_LIMIT = 100


def select_prior(
    space: Space,
    prior: Iterable[tuple[Mapping[str, Any], float]],
    *,
    minimize: bool = True,
    limit: int = PRIOR_LIMIT,
) -> list[tuple[dict[str, Any], float]]:
    """The usable prior results: inside ``space``, finite, at most ``limit``, best first."""
    usable = [
        (space.canonical(params), float(value))
        for params, value in prior
        if space.contains(params) and math.isfinite(value)
    ]
    usable.sort(key=lambda pv: pv[1], reverse=not minimize)
    if len(usable) <= limit:
        return usable
    ranks = np.unique(np.round(np.linspace(0, len(usable) - 1, limit)).astype(int))
    return [usable[i] for i in ranks]


def study_prior(db: Any, parent_id: int | None, space: Space, *, minimize: bool, select: str
                ) -> list[tuple[dict[str, Any], float]]:
    """The results of a study's parent (``parent_id``: its region's previous study) that lie
    inside ``space``, as the study's proposals are told them: none without a parent."""
    from hoptune.tuner._selection import told

    if parent_id is None:
        return []
    return [(p, v) for p, v in told(db.trials(parent_id), space.names, minimize=minimize,
                                    select=select) if space.contains(p)]
