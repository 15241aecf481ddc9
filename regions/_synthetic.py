"""Synthetic demo data: rating tables with a known low-rank structure, and a config for them.

Nothing here is real data. Each region's ratings come from its own random user
and item factors of a given rank, user and item biases, Gaussian noise and an
item popularity skew (a Zipf-like law over items), rounded to the stars 1..5.
Regions differ in rank, noise and skew, so their best hyperparameters differ
too, which is what makes tuning each region separately worth doing.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

__all__ = ["write_demo", "write_ratings"]

# (rank, noise, popularity skew) of the i-th demo region, cycled.
_PROFILES = ((3, 0.3, 0.6), (6, 0.5, 1.0), (2, 0.2, 1.4))
_DEMO_USERS, _DEMO_ITEMS = 400, 300


def write_ratings(
    path: Path,
    n_users: int,
    n_items: int,
    n_rows: int,
    rank: int,
    noise: float,
    seed: int,
    skew: float = 1.0,
) -> Path:
    """Write a CSV of ``n_rows`` distinct (user_id, item_id, rating) rows, ratings 1..5.

    rating = round(3 + (u·v / sqrt(rank) + b_user + b_item) * 0.9 + noise * N(0, 1)),
    clipped to [1, 5]. Users are drawn with log-normal activity, items with
    probability proportional to (popularity rank)^-skew. Ids are strings
    (``u17``, ``i203``). The same arguments write the same file.
    """
    if not 0 < n_rows <= n_users * n_items:
        raise ValueError(f"n_rows must be in 1..{n_users * n_items}, got {n_rows}")
    rng = np.random.default_rng(seed)
    users_f = rng.normal(size=(n_users, rank))
    items_f = rng.normal(size=(n_items, rank))
    user_bias = rng.normal(0.0, 0.3, n_users)
    item_bias = rng.normal(0.0, 0.5, n_items)
    activity = rng.lognormal(0.0, 0.5, n_users)
    popularity = np.empty(n_items)
    popularity[rng.permutation(n_items)] = np.arange(1, n_items + 1, dtype=float) ** -skew
    users, items = _distinct_pairs(
        rng, activity / activity.sum(), popularity / popularity.sum(), n_rows
    )

    score = (users_f[users] * items_f[items]).sum(1) / math.sqrt(rank)
    score += user_bias[users] + item_bias[items]
    ratings = np.clip(np.rint(3.0 + 0.9 * score + noise * rng.normal(size=n_rows)), 1, 5)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    table = pd.DataFrame(
        {
            "user_id": [f"u{u}" for u in users],
            "item_id": [f"i{i}" for i in items],
            "rating": ratings.astype(np.int64),
        }
    )
    table.to_csv(path, index=False)
    return path


def write_demo(
    folder: Path,
    regions: tuple[str, ...] = ("north", "south", "east"),
    seed: int = 0,
    rows: int = 30_000,
) -> Path:
    """Write ``data/<region>.csv`` per region and ``hoptune.toml`` into ``folder``.

    About 400 users, 300 items and ``rows`` ratings per region: one pass over
    one of two shards takes well under a second on one CPU core, and matrix
    factorisation still beats predicting the mean clearly after three epochs.
    Returns the path of the configuration file.
    """
    folder = Path(folder)
    blocks = []
    for index, name in enumerate(regions):
        rank, noise, skew = _PROFILES[index % len(_PROFILES)]
        write_ratings(
            folder / "data" / f"{name}.csv",
            n_users=_DEMO_USERS,
            n_items=_DEMO_ITEMS,
            n_rows=rows,
            rank=rank,
            noise=noise,
            seed=seed * 1000 + index,
            skew=skew,
        )
        blocks.append(
            f'[regions.{name}]\ndata = "data/{name}.csv"\nfamily = "rating_mf"\n'
            f"rating_range = [1.0, 5.0]\n"
        )
    config = folder / "hoptune.toml"
    config.write_text(_DEMO_HEADER.format() + "\n" + "\n".join(blocks))
    return config


_DEMO_HEADER = """\
# hoptune demo: synthetic ratings (see regions/_synthetic.py), not real data.
[defaults]
shards = 2
epochs = 3
batch_size = 256
# no seed here: each region's comes from its name, so regions draw their own proposals
validation_fraction = 0.2
optimizer = "fused_adamw"
trials = 8
parallel = 2
max_redeliveries = 3

[defaults.params]
lr = 0.02
embedding_dim = 16
reg = 0.001

[defaults.space]
# from 0.003: in 3 epochs a slower rate seldom gets far from predicting the mean, and a
# wider range leaves fewer of the 8 trials where the demo's champion is found
lr = {{ type = "real", low = 0.003, high = 0.1, prior = "log" }}
embedding_dim = {{ type = "int", low = 4, high = 32 }}
reg = {{ type = "real", low = 1e-5, high = 0.1, prior = "log" }}

[defaults.pruner]
reduction_factor = 3
min_epochs = 1

[schedule]
cron = "0 2 * * *"
timezone = "UTC"
"""


def _distinct_pairs(
    rng: np.random.Generator, user_p: np.ndarray, item_p: np.ndarray, n_rows: int
) -> tuple[np.ndarray, np.ndarray]:
    """``n_rows`` distinct (user, item) pairs, drawn in rounds until enough are distinct."""
    n_items = len(item_p)
    seen: np.ndarray = np.empty(0, dtype=np.int64)
    while len(seen) < n_rows:
        draws = 2 * (n_rows - len(seen)) + 1024
        cells = rng.choice(len(user_p), draws, p=user_p) * n_items + rng.choice(
            n_items, draws, p=item_p
        )
        merged = np.concatenate([seen, cells])
        _, first = np.unique(merged, return_index=True)
        seen = merged[np.sort(first)]
    seen = seen[:n_rows]
    return seen // n_items, seen % n_items
