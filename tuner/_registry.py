"""The model registry in the store: ``models/REGION/VERSION/`` and one pointer object.

Each promoted model is a version folder with its weights (a ``state_dict``),
its card (family, params, metric, data manifest hash, study and trial, visit
orders) and, for rating models, the id maps that turn user and item ids into
rows of its embeddings. ``models/REGION/champion.json`` is the registry's one
pointer: it names the champion and every version that was written whole.

A version is written in place (card last), then the pointer is replaced (one
small object: a single put on an object store, a rename on a file system):
readers follow only the pointer, so a version appears whole or not at all,
on a store with no rename too. A writer that died leaves a version folder the
pointer does not name; the next writer removes it. A registry written before
the pointer named its versions (its folders were moved into place whole) is
read by listing its version folders that have a card.
"""

from __future__ import annotations

import io
import logging
import re
from typing import TYPE_CHECKING, Any

from hoptune.core import Store, StoreError

if TYPE_CHECKING:
    import torch

__all__ = ["champion_version", "champion_card", "versions", "load_weights", "write_version",
           "set_champion", "next_version", "export_champion", "clean_staging"]

log = logging.getLogger(__name__)

_VERSION = re.compile(r"v(\d{4,})")


def _prefix(region: str) -> str:
    return f"models/{region}"


def _pointer_key(region: str) -> str:
    return f"{_prefix(region)}/champion.json"


def _pointer(store: Store, region: str) -> dict[str, Any]:
    """The pointer: ``version`` (the champion, or None) and ``versions`` (every whole one)."""
    key = _pointer_key(region)
    pointer = store.read_json(key) if store.exists(key) else {"version": None}
    if "versions" not in pointer:  # written before the pointer named the versions
        folders: dict[str, set[str]] = {}
        for k in store.list(_prefix(region)):
            parts = k.split("/")
            if len(parts) == 4 and _VERSION.fullmatch(parts[2]):
                folders.setdefault(parts[2], set()).add(parts[3])
        pointer["versions"] = sorted(n for n, files in folders.items() if "card.json" in files)
    return pointer


def _write_pointer(store: Store, region: str, pointer: dict[str, Any]) -> None:
    store.write_json(_pointer_key(region), pointer)


def champion_version(store: Store, region: str) -> str | None:
    """The champion's version, or None if the region has none yet."""
    key = _pointer_key(region)
    return store.read_json(key).get("version") if store.exists(key) else None


def champion_card(store: Store, region: str) -> dict[str, Any] | None:
    """The champion's card, or None if the region has none yet."""
    version = champion_version(store, region)
    return None if version is None else store.read_json(f"{_prefix(region)}/{version}/card.json")


def versions(store: Store, region: str) -> list[dict[str, Any]]:
    """Every promoted version's card, oldest first."""
    names = _pointer(store, region)["versions"]
    return [store.read_json(f"{_prefix(region)}/{name}/card.json")
            for name in sorted(names, key=lambda n: int(n[1:]))]


def next_version(store: Store, region: str) -> str:
    numbers = [int(name[1:]) for name in _pointer(store, region)["versions"]]
    return f"v{max(numbers, default=0) + 1:04d}"


def load_weights(store: Store, region: str, version: str) -> dict[str, torch.Tensor]:
    import torch  # here, not at the top: reading cards (models, status, export) needs none

    raw = store.read_bytes(f"{_prefix(region)}/{version}/weights.pt")
    return torch.load(io.BytesIO(raw), map_location="cpu", weights_only=True)


def write_version(store: Store, region: str, version: str, weights: dict[str, torch.Tensor],
                  card: dict[str, Any], ids: dict[str, list[str]] | None = None) -> None:
    """Write a version whole: its files (card last), then the pointer that names it.

    Call it holding the region's registry lock, after ``clean_staging``.
    """
    import torch

    # each tensor in memory of its own: a view of a checkpoint's buffer (a flat checkpoint
    # loads so) would save the whole buffer, or not save at all beside views of other dtypes;
    # a tensor named twice (tied weights) stays one
    own: dict[int, torch.Tensor] = {}
    for t in weights.values():
        if id(t) not in own:
            own[id(t)] = t.detach().clone()
    buffer = io.BytesIO()
    torch.save({name: own[id(t)] for name, t in weights.items()}, buffer)
    folder = f"{_prefix(region)}/{version}"
    pointer = _pointer(store, region)
    store.write_bytes(f"{folder}/weights.pt", buffer.getvalue())
    if ids is not None:
        store.write_json(f"{folder}/ids.json", ids)
    store.write_json(f"{folder}/card.json", card)
    pointer["versions"] = sorted({*pointer["versions"], version}, key=lambda n: int(n[1:]))
    _write_pointer(store, region, pointer)


def clean_staging(store: Store, region: str) -> list[str]:
    """Remove what a writer that died left: folders the pointer does not name.

    Call it holding the region's registry lock (no writer is running then).
    Returns the folders removed, each also logged.
    """
    whole = set(_pointer(store, region)["versions"])
    folders = sorted({key.split("/")[2] for key in store.list(_prefix(region))
                      if len(key.split("/")) > 3})
    removed = []
    for name in folders:
        if name not in whole:
            log.warning("registry of %s: removing %s, left half-written by a writer that died",
                        region, name)
            store.delete(f"{_prefix(region)}/{name}")
            removed.append(name)
    return removed


def set_champion(store: Store, region: str, version: str, updated_at: str) -> None:
    """Make ``version`` (written whole before) the champion: one replace of the pointer."""
    pointer = _pointer(store, region)
    _write_pointer(store, region, {**pointer, "version": version, "updated_at": updated_at})


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
