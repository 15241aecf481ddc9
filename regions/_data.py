"""Reading a region's table and checking it against the region's schema.

``read_table`` returns the columns the region names, converted: user and item
ids as strings (they are categorical), ratings, features and regression labels
as float64, classification labels as int64. Every problem is a ``DataError`` of
one line naming the file, the column and the first bad row, e.g.
``data/north.csv: column 'rating': row 7: value 9.0 outside rating_range [1.0, 5.0]``.
Rows are counted from 1 over the data rows, the header row excluded (row 1 is
the first line after the header of a CSV file, the first row of a Parquet file).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from hoptune.core import DataError
from hoptune.regions._config import display_path
from hoptune.regions._schema import RatingColumns, RegionConfig

__all__ = ["check_table", "read_rows", "read_table"]


def read_table(region: RegionConfig) -> pd.DataFrame:
    """The region's table with its named columns checked and converted, in file order."""
    where = display_path(region.data)
    return check_table(_read(region.data, region.format, where), region, where)


def read_rows(path: Path, region: RegionConfig) -> pd.DataFrame:
    """Rows to predict from a CSV or Parquet file, checked like the region's own table.

    The target column (rating or label) may be absent.
    """
    where = display_path(path)
    suffix = path.suffix.lower()
    if suffix not in (".csv", ".parquet"):
        raise DataError(f"{where}: must end in .csv or .parquet")
    return check_table(_read(path, suffix[1:], where), region, where, target=False)


def check_table(raw: pd.DataFrame, region: RegionConfig, where: str, *, target: bool = True
                ) -> pd.DataFrame:
    """``raw``'s named columns checked and converted (``where`` names it in errors).

    With ``target=False`` the rating or label column is checked only if present.
    """
    columns = region.columns
    if isinstance(columns, RatingColumns):
        ids, numbers = [columns.user, columns.item], [columns.rating]
    else:
        ids, numbers = [], [*columns.features, columns.label]
    label = columns.rating if isinstance(columns, RatingColumns) else columns.label
    if not target and label not in raw.columns:
        numbers.remove(label)
    for name in ids + numbers:
        if name not in raw.columns:
            found = ", ".join(str(c) for c in raw.columns)
            raise DataError(f"{where}: column {name!r}: no such column (the file has: {found})")
    if len(raw) == 0:
        raise DataError(f"{where}: no data rows")

    table = pd.DataFrame(index=pd.RangeIndex(len(raw)))
    for name in ids:
        table[name] = _ids(raw[name], f"{where}: column {name!r}")
    for name in numbers:
        table[name] = _numbers(raw[name], f"{where}: column {name!r}", _rule(region, name))
    if region.task == "classification" and label in table.columns:
        table[columns.label] = table[columns.label].astype(np.int64)
    return table


Rule = tuple[Callable[[np.ndarray], np.ndarray], Callable[[float], str]]


def _rule(region: RegionConfig, name: str) -> Rule | None:
    """The task's own check of column ``name``: which values are bad, and why."""
    columns = region.columns
    if region.task == "rating" and name == columns.rating:
        low, high = region.rating_range
        return (
            lambda v: (v < low) | (v > high),
            lambda v: f"value {v!r} outside rating_range [{low!r}, {high!r}]",
        )
    if region.task == "classification" and name == columns.label:
        return (
            lambda v: (v < 0) | (v != np.floor(v)),
            lambda v: f"value {v!r} is not an integer >= 0 (a class label)",
        )
    return None


def _read(path: Path, format: str, where: str) -> pd.DataFrame:
    """Every column of the file; a CSV's cells as text, so that we convert them ourselves."""
    if not path.is_file():
        raise DataError(f"{where}: no such file")
    try:
        if format == "csv":
            return pd.read_csv(path, dtype=str, keep_default_na=False)
        return pq.read_table(path).to_pandas()
    except pd.errors.EmptyDataError:
        raise DataError(f"{where}: empty file (no header row)") from None
    except UnicodeDecodeError as exc:
        raise DataError(f"{where}: cannot read CSV: not UTF-8 text (byte {exc.start})") from None
    except (pd.errors.ParserError, pa.ArrowException, OSError) as exc:
        kind = "CSV" if format == "csv" else "Parquet"
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise DataError(f"{where}: cannot read {kind}: {first}") from None


def _ids(column: pd.Series, where: str) -> pd.Series:
    """Ids as their string form; only an empty cell is wrong."""
    text = column.astype(str)
    row = _first_row(column.isna().to_numpy() | (text == "").to_numpy())
    if row is not None:
        raise DataError(f"{where}: row {row + 1}: empty cell")
    return text


def _numbers(column: pd.Series, where: str, rule: Rule | None) -> pd.Series:
    """A finite float64 per row; the first cell that is empty, NaN, not a number,
    infinite or refused by ``rule`` fails.
    """
    if pd.api.types.is_numeric_dtype(column) or pd.api.types.is_bool_dtype(column):
        values = column.to_numpy(dtype=np.float64, na_value=np.nan)
    else:
        values = pd.to_numeric(column, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    finite = np.isfinite(values)
    bad = ~finite
    if rule is not None:
        bad |= finite & rule[0](np.where(finite, values, 0.0))
    row = _first_row(bad)
    if row is not None:
        value = float(values[row])
        cell = column.iloc[row]
        if finite[row]:
            reason = rule[1](value)
        elif not np.isnan(value):
            reason = f"value {value!r} is not finite"
        elif _is_missing(cell):
            reason = "empty or NaN value"
        else:
            reason = f"{cell!r} is not a number"
        raise DataError(f"{where}: row {row + 1}: {reason}")
    return pd.Series(values, index=column.index)


def _is_missing(cell: object) -> bool:
    """True for a cell that holds nothing or NaN (as opposed to text that is not a number)."""
    if cell is None or cell is pd.NA:
        return True
    if isinstance(cell, float):
        return math.isnan(cell)
    if isinstance(cell, str):
        text = cell.strip()
        return text == "" or text.lower() == "nan"
    return False


def _first_row(bad: np.ndarray) -> int | None:
    hits = np.flatnonzero(bad)
    return int(hits[0]) if len(hits) else None
