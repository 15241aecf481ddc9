"""Promotion: a finished study's best trial replaces the champion only if it is better.

Both are scored on the same validation data: the study's own. The champion is
re-scored on it when it can be (same data, or the same ids and features);
a champion that cannot score the new data (its ids or features differ) is
replaced, and the card says why. Idempotent: a study's decision is recorded
once, and a redelivered promotion returns it.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from hoptune.regions import get_family, load_id_maps
from hoptune.tasks._checkpoint import checkpoint_key, load_checkpoint
from hoptune.tasks._failures import TRANSIENT, describe
from hoptune.tasks._runtime import Runtime, region_of, study_manifest
from hoptune.tasks._training import build_trial_model
from hoptune.tuner import (
    Locks,
    champion_card,
    clean_staging,
    load_weights,
    next_version,
    selected_epoch,
    set_champion,
    utcnow,
    write_version,
)

__all__ = ["promote", "promote_study"]

log = logging.getLogger(__name__)

_LOCK_SECONDS = 120.0


def _better(a: float, b: float, minimize: bool) -> bool:
    return a < b if minimize else a > b


def _comparable(card: dict[str, Any], family: str, manifest: dict[str, Any],
                ids_hash: str | None) -> bool:
    """Whether the champion can score the study's validation data like the challenger."""
    if card["family"] != family:
        return False
    if card["data_hash"] == manifest["hash"]:
        return True
    if card["meta"] != manifest["meta"]:
        return False
    return manifest["task"] != "rating" or card.get("ids_hash") == ids_hash


def _hash(ids: dict[str, list[str]] | None) -> str | None:
    import hashlib
    import json

    if ids is None:
        return None
    return hashlib.sha256(json.dumps(ids, sort_keys=True).encode()).hexdigest()


def promote(rt: Runtime, study_id: int) -> dict[str, Any]:
    """Decide and record whether study ``study_id``'s best trial becomes the champion."""
    db, store = rt.db, rt.store
    study = db.study(study_id)
    if study["promotion"] is not None:
        return study["promotion"]
    if study["state"] != "done" or study["best_trial_id"] is None:
        decision = {"promoted": False, "reason": study["failure"] or f"study {study['state']}"}
        db.set_study(study_id, promotion=decision)
        return decision
    region = region_of(study)
    family = get_family(region)
    manifest = study_manifest(rt, study)
    best = db.trial(study["best_trial_id"])
    minimize = bool(study["minimize"])
    # the challenger's weights are the end of its selected epoch (its best, or its last),
    # whose validation metric was recorded when that epoch ended, on this same data
    epoch, metric = selected_epoch(db.epochs(best["id"]), minimize, region.select)
    chosen = checkpoint_key(study_id, best["id"], epoch, region.shards - 1)
    weights = load_checkpoint(store, chosen).model  # on the CPU: the registry is for any host
    ids = load_id_maps(store, manifest) if manifest["task"] == "rating" else None

    locks, holder = Locks(db), f"study-{study_id}"
    deadline = time.monotonic() + 10 * _LOCK_SECONDS
    while locks.acquire(f"registry:{region.name}", holder, _LOCK_SECONDS) is not None:
        if time.monotonic() > deadline:
            raise TimeoutError(f"registry of {region.name} stayed locked")
        time.sleep(0.2)
    try:
        clean_staging(store, region.name)
        decision = _decide(rt, region, family, manifest, _hash(ids), metric, minimize, study_id)
        if decision["promoted"] and "version" not in decision:
            version = next_version(store, region.name)
            now = utcnow().isoformat()
            card = {
                "region": region.name, "version": version, "created_at": now,
                "family": region.family, "task": region.task, "params": best["params"],
                "metric_name": family.scoring(manifest["meta"], best["params"])[0],
                "metric": metric, "minimize": minimize,
                "data_hash": manifest["hash"], "meta": manifest["meta"],
                "ids_hash": _hash(ids),
                "study_id": study_id, "trial_id": best["id"], "trial_number": best["number"],
                "seed": best["seed"], "epochs": best["epochs_done"],
                "select": region.select, "selected_epoch": epoch,
                "visit_orders": [e["visit_order"] for e in db.epochs(best["id"])],
                "previous": decision.get("champion"),
                "previous_metric": decision.get("champion_metric"),
                "reason": decision["reason"],
            }
            write_version(store, region.name, version, weights, card, ids)
            set_champion(store, region.name, version, now)
            decision["version"] = version
        db.set_study(study_id, promotion=decision)
    finally:
        locks.release(f"registry:{region.name}", holder)
    log.info("study %d of %s: %s", study_id, region.name, decision["reason"])
    return decision


def _decide(rt: Runtime, region: Any, family: Any, manifest: dict[str, Any],
            ids_hash: str | None, metric: float, minimize: bool, study_id: int
            ) -> dict[str, Any]:
    name = family.scoring(manifest["meta"], region.params)[0]
    decision: dict[str, Any] = {"challenger_metric": metric, "champion": None,
                                "champion_metric": None}
    card = champion_card(rt.store, region.name)
    if card is None:
        return {**decision, "promoted": True,
                "reason": f"first champion ({name} {metric:.4g})"}
    if card["study_id"] == study_id:  # promoted by a delivery that died before recording it
        return {"challenger_metric": metric, "champion": card["previous"],
                "champion_metric": card["previous_metric"], "promoted": True,
                "version": card["version"], "reason": card["reason"]}
    decision["champion"] = card["version"]
    if not _comparable(card, region.family, manifest, ids_hash):
        return {**decision, "promoted": True,
                "reason": f"replaces {card['version']}, which cannot score this data "
                          f"(its ids or features differ); {name} {metric:.4g}"}
    champion = build_trial_model(region, card["params"], card["seed"], manifest["meta"],
                                 rt.device)
    champion.load_state_dict(load_weights(rt.store, region.name, card["version"]))
    held = float(family.evaluate(champion, rt.validation(manifest)))
    decision["champion_metric"] = held
    if _better(metric, held, minimize):
        return {**decision, "promoted": True,
                "reason": f"{name} {metric:.4g} beats {card['version']}'s {held:.4g}"}
    return {**decision, "promoted": False,
            "reason": f"kept {card['version']}: {name} {metric:.4g} does not beat {held:.4g}"}


def promote_study(rt: Runtime, study_id: int) -> dict[str, Any]:
    """Promote a finished study's best trial if better, and record a nightly region's outcome.

    A failure that is not transient is recorded as the study's promotion
    (``failed``, with its reason), so the drivers waiting on it return and say why.
    """
    from hoptune.tasks._nightly import after_promotion

    try:
        decision = promote(rt, study_id)
    except TRANSIENT:
        raise
    except Exception as exc:
        log.exception("promoting study %d failed", study_id)
        decision = {"promoted": False, "failed": True, "reason": describe(exc)}
        rt.db.set_study(study_id, promotion=decision)
    after_promotion(rt, rt.db.study(study_id), decision)
    return decision
