"""Promotion: a finished study's best trial replaces the champion only if it is better.

Both are scored on the same validation rows: the study's own. The champion
is re-scored on them through its own id maps and feature scaling (an id it
never saw gets its fallback), so new users, items or feature statistics never
stop the comparison; the card records both metrics and the rows they were
computed on. Idempotent: a study's decision is recorded
once, and a redelivered promotion returns it.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from hoptune.core import ConfigError, StoreError
from hoptune.regions import decode_validation, get_family, load_id_maps
from hoptune.tasks.worker import (
    TRANSIENT,
    Runtime,
    checkpoint_key,
    describe,
    load_checkpoint,
    region_of,
    study_manifest,
)
from hoptune.tuner import (
    Locks,
    champion_card,
    clean_staging,
    load_predictor,
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
    if study.promotion is not None:
        return study.promotion
    if study.kind == "calibration":  # its trials measured hop costs, nothing else
        decision = {"promoted": False, "reason": "a calibration study is never promoted"}
        db.set_study(study_id, promotion=decision)
        return decision
    if study.state != "done" or study.best_trial_id is None:
        decision = {"promoted": False, "reason": study.failure or f"study {study.state}"}
        db.set_study(study_id, promotion=decision)
        return decision
    region = region_of(study)
    family = get_family(region)
    manifest = study_manifest(rt, study)
    best = db.trial(study.best_trial_id)
    minimize = bool(study.minimize)
    # the challenger's weights are the end of its selected epoch (its best, or its last),
    # whose validation metric was recorded when that epoch ended, on this same data
    epoch, metric = selected_epoch(db.epochs(best.id), minimize, region.select)
    chosen = checkpoint_key(study_id, best.id, epoch, region.shards - 1)
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
        decision = _decide(rt, region, family, manifest, metric, minimize, study_id)
        if decision["promoted"] and "version" not in decision:
            version = next_version(store, region.name)
            now = utcnow().isoformat()
            card = {
                "region": region.name, "version": version, "created_at": now,
                "family": region.family, "task": region.task, "params": best.params,
                "metric_name": family.scoring(manifest["meta"], best.params)[0],
                "metric": metric, "minimize": minimize,
                "data_hash": manifest["hash"], "meta": manifest["meta"],
                "ids_hash": _hash(ids),
                "study_id": study_id, "trial_id": best.id, "trial_number": best.number,
                "seed": best.seed, "epochs": best.epochs_done,
                # epochs are numbered from 1 wherever a user reads them
                "select": region.select, "selected_epoch": epoch + 1,
                "last_epoch_metric": best.last_metric,
                "visit_orders": [e.visit_order for e in db.epochs(best.id)],
                "region_config": _ran_with(study),
                "previous": decision.get("champion"),
                "previous_metric": decision.get("champion_metric"),
                "compared_on": decision.get("compared_on"),
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


def _ran_with(study: Any) -> dict[str, Any]:
    """The region's configuration as the study ran: its budget, trials in flight and
    epochs are the study's own (``hoptune tune --trials``, the demo's flags), not the file's."""
    return {**study.region_config, "trials": study.budget, "parallel": study.parallel,
            "epochs": study.epochs}


def _decide(rt: Runtime, region: Any, family: Any, manifest: dict[str, Any], metric: float,
            minimize: bool, study_id: int) -> dict[str, Any]:
    """Compare the challenger with the champion on the study's validation rows.

    The champion scores the same rows as the challenger, decoded to raw ids
    and features and encoded through the champion's own id maps and feature
    scaling (ids it never saw get its fallback), so it can always be compared.
    It is replaced without a comparison only when it cannot score them at all
    (another task or metric, or a model that fails on them), and the reason
    says so.
    """
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
                "version": card["version"], "reason": card["reason"],
                "compared_on": card.get("compared_on")}
    decision["champion"] = card["version"]
    decision["compared_on"] = {"data_hash": manifest["hash"],
                               "validation_rows": manifest["validation_rows"]}
    held, why = _champion_metric(rt, region, manifest, card, name)
    if held is None:
        return {**decision, "promoted": True,
                "reason": f"replaces {card['version']}, which cannot score this data ({why}); "
                          f"{name} {metric:.4g}"}
    decision["champion_metric"] = held
    if _better(metric, held, minimize):
        return {**decision, "promoted": True,
                "reason": f"{name} {metric:.4g} beats {card['version']}'s {held:.4g} "
                          f"on the same {manifest['validation_rows']} validation rows"}
    return {**decision, "promoted": False,
            "reason": f"kept {card['version']}: {name} {metric:.4g} does not beat {held:.4g} "
                      f"on the same {manifest['validation_rows']} validation rows"}


def _champion_metric(rt: Runtime, region: Any, manifest: dict[str, Any], card: dict[str, Any],
                     name: str) -> tuple[float | None, str]:
    """The champion's metric on the study's validation rows, or None and why not."""
    if card.get("task") != region.task or card.get("metric_name") != name:
        return None, (f"it is a {card.get('task')} model judged by {card.get('metric_name')}, "
                      f"this study a {region.task} model judged by {name}")
    try:
        champion = load_predictor(rt.store, region.name, card["version"])
        rows = decode_validation(rt.store, manifest, region)
        return champion.score(rows, f"validation rows of ingest {manifest['hash']}"), ""
    except (StoreError, ConfigError) as exc:
        return None, str(exc)
    except Exception as exc:  # noqa: BLE001 - a user's model may fail on new rows in any way
        log.warning("champion %s of %s cannot score the new validation rows", card["version"],
                    region.name, exc_info=True)
        return None, describe(exc)


def promote_study(rt: Runtime, study_id: int) -> dict[str, Any]:
    """Promote a finished study's best trial if better, and record a nightly region's outcome.

    A failure that is not transient is recorded as the study's promotion
    (``failed``, with its reason), so the drivers waiting on it return and say why.
    """
    from hoptune.tasks.study._nightly import after_promotion

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
