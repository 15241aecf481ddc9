"""A registry version as a predictor of raw rows: ``load_champion``, ``load_version``.

The version's card carries what rebuilding and encoding need: the region's
configuration as it was trained (family, task, columns, metric), the params
and the ingest's meta (feature scaling); ``ids.json`` holds the id maps of a
rating model. Raw rows (a DataFrame, a list of dicts, a dict of lists) are
checked like ingest checks a table, encoded through those maps and that
scaling (an id never seen gets the model's fallback, see ``regions``), and
scored by the model in eval mode, on the CPU.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
import torch

from hoptune.core import Store, StoreError
from hoptune.regions import RegionConfig, check_table, encode_rows, get_family
from hoptune.tuner._registry import champion_version

__all__ = ["Predictor", "load_predictor", "read_predictor"]

Rows = pd.DataFrame | Sequence[Mapping[str, Any]] | Mapping[str, Sequence[Any]]


class Predictor:
    """One promoted model and the encoding of the ingest it was trained on.

    ``predict`` returns one value per row: the predicted rating or regression
    value, or for classification the most probable class (``predict_proba``
    gives the probabilities). ``score`` is the region's validation metric on
    rows that carry the target. Not thread-safe (one torch model).
    """

    def __init__(self, card: dict[str, Any], weights: dict[str, torch.Tensor],
                 ids: dict[str, list[str]] | None) -> None:
        self.card = card
        self.region = RegionConfig.model_validate(card["region_config"])
        self.family = get_family(self.region)
        self.meta = card["meta"]
        self.ids = ids
        with torch.random.fork_rng(devices=[]):
            model = self.family.build(card["params"], self.meta)
        model.load_state_dict(weights)
        self.model = model.eval()

    @property
    def version(self) -> str:
        return self.card["version"]

    def encode(self, rows: Rows, where: str = "rows") -> dict[str, torch.Tensor]:
        """``rows`` checked (``DataError`` naming ``where``, the column and the row) and
        encoded as the model's input, the target included when the rows have it."""
        frame = rows if isinstance(rows, pd.DataFrame) else pd.DataFrame(rows)
        table = check_table(frame.reset_index(drop=True), self.region, where, target=False)
        return encode_rows(table, self.region, self.meta, self.ids)

    def _output(self, data: dict[str, torch.Tensor]) -> torch.Tensor:
        with torch.no_grad():
            return self.model(data)

    def predict(self, rows: Rows, where: str = "rows") -> np.ndarray:
        return self.predict_encoded(self.encode(rows, where))

    def predict_encoded(self, data: dict[str, torch.Tensor]) -> np.ndarray:
        """``predict`` of rows ``encode`` returned."""
        output = self._output(data)
        if self.region.task == "classification":
            return output.argmax(-1).numpy()
        return output.double().numpy()

    def fallbacks(self, data: dict[str, torch.Tensor]) -> np.ndarray:
        """Which encoded rows carry an id the model never saw (index -1): the model's
        fallback predicted them (see ``regions``). All False for a model without ids."""
        mask = np.zeros(len(next(iter(data.values()))), dtype=bool)
        for key in ("user", "item"):
            if key in data:
                mask |= (data[key] < 0).numpy()
        return mask

    def predict_proba(self, rows: Rows, where: str = "rows") -> np.ndarray:
        if self.region.task != "classification":
            raise TypeError(f"task {self.region.task!r} has no class probabilities")
        return self._output(self.encode(rows, where)).softmax(-1).double().numpy()

    def score(self, rows: Rows, where: str = "rows") -> float:
        """The model's validation metric on ``rows``, which must carry the target."""
        return self.score_encoded(self.encode(rows, where))

    def score_encoded(self, data: dict[str, torch.Tensor]) -> float:
        return float(self.family.evaluate(self.model, data))


def load_predictor(store: Store, region: str, version: str | None = None) -> Predictor:
    """The predictor of ``region``'s ``version`` (default: its champion) in the registry."""
    version = version or champion_version(store, region)
    if version is None:
        raise StoreError(f"region {region!r} has no champion yet; run `hoptune nightly` or "
                         f"`hoptune tune {region}` first")
    if not store.exists(f"models/{region}/{version}/card.json"):
        raise StoreError(f"region {region!r} has no version {version!r}")
    return read_predictor(store, f"models/{region}/{version}/")


def read_predictor(store: Store, folder: str = "") -> Predictor:
    """The predictor whose card, weights and id maps lie under ``folder`` of ``store``
    (a registry version, or the folder ``hoptune export`` wrote)."""
    if not store.exists(f"{folder}card.json"):
        raise StoreError(f"{store.url}: no card.json in {folder or 'its top folder'}")
    card = store.read_json(f"{folder}card.json")
    if "region_config" not in card:
        raise StoreError(f"{folder or store.url}: its card carries no region configuration "
                         f"(promoted by an older hoptune); promote a newer version to serve it")
    ids = store.read_json(f"{folder}ids.json") if store.exists(f"{folder}ids.json") else None
    raw = store.read_bytes(f"{folder}weights.pt")
    weights = torch.load(io.BytesIO(raw), map_location="cpu", weights_only=True)
    return Predictor(card, weights, ids)
