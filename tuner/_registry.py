"""The model registry in the store: ``models/REGION/VERSION/`` and a champion pointer.

Each promoted model is a version folder with its weights (a ``state_dict``),
its card (family, params, metric, data manifest hash, study and trial, visit
orders) and, for rating models, the id maps that turn user and item ids into
rows of its embeddings. ``models/REGION/champion.json`` names the champion;
it is rewritten atomically, so a reader always sees one whole version.

A version is written under a staging name and moved into place whole (its
card last where the store cannot rename a folder): a reader never sees half a
version, and a version folder without its card is not a version. A writer
that died leaves its staging folder behind; the next writer removes it.
"""

from __future__ import annotations

import io
import logging
import re
import uuid
from typing import TYPE_CHECKING, Any

from hoptune.core import Store, StoreError

if TYPE_CHECKING:
    import torch

__all__ = ["champion_version", "champion_card", "versions", "load_weights", "write_version",
           "set_champion", "next_version", "export_champion", "clean_staging"]

log = logging.getLogger(__name__)

_VERSION = re.compile(r"v(\d{4,})")
_STAGING = ".staging-"


def _prefix(region: str) -> str:
    return f"models/{region}"


def champion_version(store: Store, region: str) -> str | None:
    """The champion's version, or None if the region has none yet."""
    pointer = f"{_prefix(region)}/champion.json"
    return store.read_json(pointer)["version"] if store.exists(pointer) else None


def champion_card(store: Store, region: str) -> dict[str, Any] | None:
    """The champion's card, or None if the region has none yet."""
    version = champion_version(store, region)
    return None if version is None else store.read_json(f"{_prefix(region)}/{version}/card.json")


def versions(store: Store, region: str) -> list[dict[str, Any]]:
    """Every promoted version's card, oldest first."""
    cards = [store.read_json(key) for key in store.list(_prefix(region))
             if key.endswith("/card.json") and _VERSION.fullmatch(key.split("/")[2])]
    return sorted(cards, key=lambda c: int(c["version"][1:]))


def next_version(store: Store, region: str) -> str:
    numbers = [int(m.group(1)) for key in store.list(_prefix(region))
               if (m := _VERSION.fullmatch(key.split("/")[2]))]
    return f"v{max(numbers, default=0) + 1:04d}"


def load_weights(store: Store, region: str, version: str) -> dict[str, torch.Tensor]:
    import torch  # here, not at the top: reading cards (models, status, export) needs none

    raw = store.read_bytes(f"{_prefix(region)}/{version}/weights.pt")
    return torch.load(io.BytesIO(raw), map_location="cpu", weights_only=True)


def write_version(store: Store, region: str, version: str, weights: dict[str, torch.Tensor],
                  card: dict[str, Any], ids: dict[str, list[str]] | None = None) -> None:
    """Write a version whole: into a staging folder, then moved to its name, card last."""
    import torch

    buffer = io.BytesIO()
    torch.save(weights, buffer)
    staging = f"{_prefix(region)}/{_STAGING}{version}-{uuid.uuid4().hex[:8]}"
    store.write_bytes(f"{staging}/weights.pt", buffer.getvalue())
    if ids is not None:
        store.write_json(f"{staging}/ids.json", ids)
    store.write_json(f"{staging}/card.json", card)
    store.move_folder(staging, f"{_prefix(region)}/{version}", last="card.json")


def clean_staging(store: Store, region: str) -> list[str]:
    """Remove what a writer that died left: staging folders, version folders with no card.

    Call it holding the region's registry lock (no writer is running then).
    Returns the folders removed, each also logged.
    """
    folders: dict[str, set[str]] = {}
    for key in store.list(_prefix(region)):
        parts = key.split("/")
        if len(parts) > 3:
            folders.setdefault(parts[2], set()).add(parts[3])
    removed = []
    for name, files in sorted(folders.items()):
        if name.startswith(_STAGING) or (_VERSION.fullmatch(name) and "card.json" not in files):
            log.warning("registry of %s: removing %s, left half-written by a writer that died",
                        region, name)
            store.delete(f"{_prefix(region)}/{name}")
            removed.append(name)
    return removed


def set_champion(store: Store, region: str, version: str, updated_at: str) -> None:
    store.write_json(f"{_prefix(region)}/champion.json",
                     {"version": version, "updated_at": updated_at})


def export_champion(store: Store, region: str, out: Any) -> dict[str, Any]:
    """Write the champion for serving into folder ``out``: state_dict, card, id maps."""
    from pathlib import Path

    card = champion_card(store, region)
    if card is None:
        raise StoreError(f"region {region!r} has no champion yet; run `hoptune nightly` or "
                         f"`hoptune tune {region}` first")
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    source = f"{_prefix(region)}/{card['version']}"
    for name in ("weights.pt", "card.json", "ids.json"):
        if store.exists(f"{source}/{name}"):
            (folder / name).write_bytes(store.read_bytes(f"{source}/{name}"))
    return card
