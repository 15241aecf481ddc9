from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from hoptune.core import DataError
from hoptune.regions import load_config
from hoptune.regions._data import read_table

GOOD = "user_id,item_id,rating\nu1,i1,1\n007,i2,5.0\nu2, i1 ,2.5\n"


def test_rating_table_is_converted(rating_region):
    table = read_table(rating_region(GOOD))
    assert table["user_id"].tolist() == ["u1", "007", "u2"]
    assert table["item_id"].tolist() == ["i1", "i2", " i1 "]
    assert table["rating"].dtype == np.float64
    assert table["rating"].tolist() == [1.0, 5.0, 2.5]


RATING_BAD = [
    (
        "user_id,item_id,score\nu1,i1,3\n",
        "column 'rating': no such column (the file has: user_id, item_id, score)",
    ),
    ("user_id,item_id,rating\n", "no data rows"),
    ("", "empty file (no header row)"),
    ("user_id,item_id,rating\nu1,i1,3\nu2,,3\n", "column 'item_id': row 2: empty cell"),
    ("user_id,item_id,rating\nu1,i1,3\nu2,i1,\n", "column 'rating': row 2: empty or NaN value"),
    ("user_id,item_id,rating\nu1,i1,3\nu2,i1,NaN\n", "column 'rating': row 2: empty or NaN value"),
    (
        "user_id,item_id,rating\nu1,i1,3\nu2,i1,three\n",
        "column 'rating': row 2: 'three' is not a number",
    ),
    (
        "user_id,item_id,rating\nu1,i1,3\nu2,i1,inf\n",
        "column 'rating': row 2: value inf is not finite",
    ),
    (
        "user_id,item_id,rating\n" + "u1,i1,3\n" * 6 + "u1,i2,9\nu1,i3,0\n",
        "column 'rating': row 7: value 9.0 outside rating_range [1.0, 5.0]",
    ),
    (
        "user_id,item_id,rating\nu1,i1,0.5\nu1,i2,x\n",
        "column 'rating': row 1: value 0.5 outside rating_range [1.0, 5.0]",
    ),
    (
        "user_id,item_id,rating\nu1,i1,3\nu1,i2,3,4\n",
        "cannot read CSV: Error tokenizing data. C error: Expected 3 fields in line 3, saw 4",
    ),
]


@pytest.mark.parametrize(("text", "message"), RATING_BAD, ids=[m for _, m in RATING_BAD])
def test_bad_rating_data_names_file_column_and_first_bad_row(rating_region, text, message):
    region = rating_region(text)
    with pytest.raises(DataError) as caught:
        read_table(region)
    assert str(caught.value) == f"data/north.csv: {message}"


def test_missing_data_file(rating_region, workdir):
    region = rating_region()
    (workdir / "data" / "north.csv").unlink()
    with pytest.raises(DataError) as caught:
        read_table(region)
    assert str(caught.value) == "data/north.csv: no such file"


def test_classification_labels_are_integers_from_zero(tabular_region):
    table = read_table(tabular_region("classification", "f0,f1,label\n1,2,0\n3,4,2.0\n"))
    assert table["label"].dtype == np.int64 and table["label"].tolist() == [0, 2]
    assert table["f0"].tolist() == [1.0, 3.0]


@pytest.mark.parametrize(
    ("task", "text", "message"),
    [
        (
            "classification",
            "f0,f1,label\n1,2,0\n3,4,1.5\n",
            "column 'label': row 2: value 1.5 is not an integer >= 0 (a class label)",
        ),
        (
            "classification",
            "f0,f1,label\n1,2,-1\n",
            "column 'label': row 1: value -1.0 is not an integer >= 0 (a class label)",
        ),
        ("regression", "f0,f1,label\n1,2,-1\n1,b,2\n", "column 'f1': row 2: 'b' is not a number"),
        (
            "regression",
            "f0,f1,label\n1,2,-1\n1,2,-inf\n",
            "column 'label': row 2: value -inf is not finite",
        ),
        ("regression", "f0,label\n1,2\n", "column 'f1': no such column (the file has: f0, label)"),
    ],
)
def test_bad_tabular_data(tabular_region, task, text, message):
    with pytest.raises(DataError) as caught:
        read_table(tabular_region(task, text))
    assert str(caught.value) == f"data/west.csv: {message}"


def test_parquet_nulls_and_integer_ids(write_config, workdir):
    path = workdir / "data" / "north.parquet"
    path.parent.mkdir()
    frame = pd.DataFrame({"u": [10, 2, 3], "i": ["a", "b", "c"], "r": [4.0, 3.0, None]})
    frame.to_parquet(path)
    config = write_config(
        '[regions.north]\ndata = "data/north.parquet"\nfamily = "rating_mf"\n'
        'columns = { user = "u", item = "i", rating = "r" }\nrating_range = [1, 5]\n'
    )
    region = load_config(config).region("north")
    with pytest.raises(DataError) as caught:
        read_table(region)
    assert str(caught.value) == "data/north.parquet: column 'r': row 3: empty or NaN value"
    frame.dropna().to_parquet(path)
    assert read_table(region)["u"].tolist() == ["10", "2"]
