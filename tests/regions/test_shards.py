from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from hoptune.regions._shards import split_rows, validation_size


def table(rows: int = 103) -> pd.DataFrame:
    return pd.DataFrame(
        {"user": [f"u{i % 17}" for i in range(rows)], "value": np.arange(rows) * 0.5}
    )


def test_split_covers_every_row_once_with_balanced_shards():
    split = split_rows(table(), seed=0, validation_fraction=0.2, shards=3)
    assert len(split.validation) == 21 == validation_size(103, 0.2)
    assert [len(s) for s in split.shards] == [28, 27, 27]
    everything = np.concatenate([split.validation, *split.shards])
    assert sorted(everything.tolist()) == list(range(103))
    for part in (split.validation, *split.shards):
        assert part.tolist() == sorted(part.tolist())


def test_split_is_deterministic_and_depends_on_the_seed():
    first = split_rows(table(), seed=0, validation_fraction=0.2, shards=2)
    again = split_rows(table(), seed=0, validation_fraction=0.2, shards=2)
    other = split_rows(table(), seed=1, validation_fraction=0.2, shards=2)
    assert first.validation.tolist() == again.validation.tolist()
    assert [s.tolist() for s in first.shards] == [s.tolist() for s in again.shards]
    assert first.validation.tolist() != other.validation.tolist()


def test_split_follows_row_content_not_row_order():
    original = table()
    shuffled = original.sample(frac=1.0, random_state=5).reset_index(drop=True)

    def contents(frame, positions):
        return sorted(frame["value"].iloc[positions].tolist())

    a = split_rows(original, seed=4, validation_fraction=0.3, shards=2)
    b = split_rows(shuffled, seed=4, validation_fraction=0.3, shards=2)
    assert contents(original, a.validation) == contents(shuffled, b.validation)
    for k in range(2):
        assert contents(original, a.shards[k]) == contents(shuffled, b.shards[k])


def test_validation_keeps_at_least_one_row_and_needs_room_for_the_shards():
    assert validation_size(3, 0.01) == 1
    split = split_rows(table(3), seed=0, validation_fraction=0.01, shards=2)
    assert len(split.validation) == 1 and [len(s) for s in split.shards] == [1, 1]
    with pytest.raises(ValueError, match="3 rows cannot fill 3 shards"):
        split_rows(table(3), seed=0, validation_fraction=0.01, shards=3)
