"""Checkpoint retention, and ``hoptune gc`` for what older studies left in the store.

While a trial runs it keeps its two latest checkpoints (enough to resume, and
to rewind once if the latest is unreadable) and the end of its best epoch so
far; when it ends it keeps only its final weights and, with ``select =
"best"``, its best epoch's, which promotion reads (a champion's weights are
copied into the registry, so they outlive its checkpoints); a failed trial
keeps none.
``hoptune gc`` applies the same rule to finished studies (those from before it
existed too), and with ``--older-than DAYS`` removes every checkpoint of
studies that ended longer ago than that.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

from hoptune.core import Store
from hoptune.tasks.worker import Runtime, checkpoint_key
from hoptune.tuner import selected_epoch, utcnow

__all__ = ["Collected", "collect"]


@dataclass
class Collected:
    """What a collection removed (or, dry, would remove)."""

    keys: list[str] = field(default_factory=list)
    bytes: int = 0


def collect(rt: Runtime, *, older_than_days: float | None = None, dry_run: bool = False
            ) -> Collected:
    """Remove the checkpoints that retention does not keep, from every finished study."""
    out = Collected()
    cutoff = utcnow() - timedelta(days=older_than_days) if older_than_days is not None else None
    for study in rt.db.studies():
        if study.state == "running":
            continue
        shards = study.region_config["shards"]
        prefix = f"checkpoints/study-{study.id}"
        if cutoff is not None and study.finished_at < cutoff:
            _remove(rt.store, rt.store.list(prefix), out, dry_run)
            continue
        select = study.region_config.get("select", "best")
        keep = set()
        for t in rt.db.trials(study.id):
            if t.state in ("done", "pruned") and t.epochs_done > 0:
                chosen = selected_epoch(rt.db.epochs(t.id), bool(study.minimize), select)
                ends = {t.epochs_done - 1, *([chosen[0]] if chosen else [])}
                keep |= {checkpoint_key(study.id, t.id, e, shards - 1) for e in ends}
        _remove(rt.store, [k for k in rt.store.list(prefix)
                           if k not in keep and ".unreadable-" not in k], out, dry_run)
    return out


def _remove(store: Store, keys: list[str], out: Collected, dry_run: bool) -> None:
    for key in keys:
        out.keys.append(key)
        out.bytes += int(store.fs.size(store.path(key)))
        if not dry_run:
            store.delete(key)
