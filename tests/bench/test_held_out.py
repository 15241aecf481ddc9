"""bench/held_out.py's data handling: MovieLens files and the held-out split."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from bench.held_out import read_ratings, split


def test_recbole_and_original_movielens_files_read_alike(tmp_path: Path) -> None:
    (tmp_path / "ml.inter").write_text("user_id:token\titem_id:token\trating:float\t"
                                       "timestamp:float\n196\t242\t3\t881250949\n")
    (tmp_path / "u.data").write_text("196\t242\t3\t881250949\n")
    expected = pd.DataFrame({"user_id": ["196"], "item_id": ["242"], "rating": [3.0]})
    pd.testing.assert_frame_equal(read_ratings(tmp_path / "ml.inter"), expected)
    pd.testing.assert_frame_equal(read_ratings(tmp_path / "u.data"), expected)


def test_the_held_out_rows_are_a_fixed_tenth_disjoint_from_the_rest() -> None:
    table = pd.DataFrame({"user_id": [str(i) for i in range(5000)], "item_id": "i",
                          "rating": np.arange(5000.0)})
    train, held = split(table)
    again, _ = split(table)
    pd.testing.assert_frame_equal(train, again)
    assert len(train) + len(held) == 5000
    assert not set(train["user_id"]) & set(held["user_id"])
    # binomial(5000, 0.1): 500 ± 21 (one standard deviation); 5 of them bound it
    assert abs(len(held) - 500) < 5 * 21.3
