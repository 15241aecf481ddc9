"""A study's report: one ``index.html`` with tables and the five PNG plots next to it.

It reads the study database and the store's model registry and writes into a
folder; it changes nothing else. A registry that cannot be read means "no
champion yet", not a failure. The file list is the same
for every study (a plot with nothing to show says so), so links never break.
"""

from __future__ import annotations

import html
import json
import math
import os
import re
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hoptune.core import HoptuneError, Store, StoreError, StudyError
from hoptune.tuner._hop_records import HopRecords
from hoptune.tuner._plots import (
    Bar,
    Card,
    Dim,
    TrialResult,
    WorkerLoad,
    plot_champions,
    plot_gantt,
    plot_history,
    plot_learning_curves,
    plot_params,
)
from hoptune.tuner._registry import champion_version, versions
from hoptune.tuner._rows import EpochRow, HopRow, StudyRow, TrialRow
from hoptune.tuner._schema import TRIAL_STATES, utcnow
from hoptune.tuner._selection import selected_epoch
from hoptune.tuner._studydb import StudyDB

__all__ = ["PLOTS", "read_champions", "write_report"]

# The report's PNG files, in the order the page shows them.
PLOTS = {
    "history": "optimization_history.png",
    "params": "params.png",
    "curves": "learning_curves.png",
    "gantt": "hops_gantt.png",
    "champions": "champion_history.png",
}


def write_report(db: StudyDB, store: Store, region: str, out: Path,
                 study_id: int | None = None) -> Path:
    """Write the report of a study of ``region`` (default: its latest) into ``out``.

    Returns the path of ``index.html``. Raises ``StudyError`` when the region
    has no study or ``study_id`` is not one of its studies, before writing anything.
    """
    study = _pick_study(db, region, study_id)
    now = utcnow()
    trial_rows = db.trials(study.id)
    curves = {t.id: db.epochs(t.id) for t in trial_rows}
    hops = HopRecords(db).all(study_id=study.id)
    metric_name = _metric_name(study)
    minimize = bool(study.minimize)
    select = study.region_config.get("select", "best")
    results = [_result(t, curves[t.id], minimize, select) for t in trial_rows]
    number_of = {t.id: t.number for t in trial_rows}
    best = next((t for t in trial_rows if t.id == study.best_trial_id), None)
    live = {t.id for t in trial_rows if t.state == "running"} \
        if study.state == "running" else set()
    bars, loads, span = _gantt_data(hops, number_of, live, now, HopRecords(db))
    cards, current = read_champions(store, region)

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    plot_history(out / PLOTS["history"], results, metric_name=metric_name, minimize=minimize,
                 best_number=best.number if best else None)
    plot_params(out / PLOTS["params"], results, _dims(study.space, trial_rows),
                metric_name=metric_name, minimize=minimize)
    plot_learning_curves(out / PLOTS["curves"], results, metric_name=metric_name,
                         minimize=minimize, epochs=study.epochs)
    plot_gantt(out / PLOTS["gantt"], bars, loads)
    plot_champions(out / PLOTS["champions"], cards, region=region, metric_name=metric_name,
                   minimize=minimize, now=now)
    page = _page(study, trial_rows, results, best, hops, loads, span, cards, current,
                 metric_name, now, select)
    index = out / "index.html"
    tmp = out / f".index.html.tmp-{os.getpid()}"
    tmp.write_text(page, encoding="utf-8")
    os.replace(tmp, index)
    return index


def _pick_study(db: StudyDB, region: str, study_id: int | None) -> StudyRow:
    if study_id is None:
        study = db.latest_study(region)
        if study is None:
            raise StudyError(f"region {region!r} has no study yet: run `hoptune tune {region}`")
        return study
    study = db.study(study_id)
    if study.region != region:
        raise StudyError(f"study {study_id} is of region {study.region!r}, not {region!r}")
    return study


def _metric_name(study: StudyRow) -> str:
    """The family's metric name; "metric" if the stored region no longer loads here."""
    from hoptune.regions import RegionConfig, get_family

    try:
        family = get_family(RegionConfig.model_validate(study.region_config))
        meta = (study.manifest or {}).get("meta")
        if meta is None:
            return family.metric_name
        return family.scoring(meta, study.region_config.get("params", {}))[0]
    except (HoptuneError, ValueError):
        return "metric"


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and math.isfinite(value)


def _result(trial: TrialRow, epochs: list[EpochRow], minimize: bool, select: str
            ) -> TrialResult:
    """The trial's finite epoch metrics (NaN epochs are skipped) and its selected epoch's:
    the one metric every table, plot and the registry show for it (``selected_epoch``)."""
    curve = tuple((e.epoch + 1, float(e.metric)) for e in epochs if _finite(e.metric))
    chosen = selected_epoch(epochs, minimize, select)
    if chosen is None:
        return TrialResult(trial.number, trial.state, dict(trial.params), None, curve)
    return TrialResult(trial.number, trial.state, dict(trial.params), chosen[1], curve,
                       selected=chosen[0] + 1)


def _dims(space: dict[str, Any] | None, trials: list[TrialRow]) -> list[Dim]:
    """The search space's dimensions; for a fixed study, the params that vary across trials."""
    if space:
        dims = []
        for name, spec in space.items():
            if spec.get("type") == "categorical":
                dims.append(Dim(name, choices=tuple(spec.get("choices", ()))))
            else:
                low, high = spec.get("low"), spec.get("high")
                bounds = (float(low), float(high)) if _finite(low) and _finite(high) else None
                dims.append(Dim(name, log=spec.get("prior") == "log", bounds=bounds))
        return dims
    dims = []
    names = sorted({k for t in trials for k in t.params})
    for name in names:
        values = [t.params[name] for t in trials if name in t.params]
        distinct = list(dict.fromkeys(json.dumps(v, sort_keys=True) for v in values))
        if len(distinct) < 2:
            continue
        numeric = all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)
        if numeric:
            low, high = min(values), max(values)
            dims.append(Dim(name, log=low > 0 and high / low >= 100))
        else:
            dims.append(Dim(name, choices=tuple(json.loads(v) for v in distinct)))
    return dims


def _intervals(hops: Sequence[HopRow], live: set[int], now: datetime
               ) -> list[tuple[HopRow, datetime, datetime, bool]]:
    """(hop, start, end, still running) of every hop drawn and counted.

    Finished hops count, and so do the started hops of the ``live`` trials
    (running, in a running study), up to ``now``. Any other started hop never
    finished (its worker died, its trial failed): it is left out.
    """
    out = []
    for hop in hops:
        if hop.started_at is None or hop.worker is None:
            continue
        if hop.finished_at is not None and hop.state == "done":
            out.append((hop, hop.started_at, hop.finished_at, False))
        elif hop.state == "running" and hop.trial_id in live:
            out.append((hop, hop.started_at, max(now, hop.started_at), True))
    return out


def _loads(intervals: list[tuple[HopRow, datetime, datetime, bool]],
           others: Sequence[HopRow] = ()) -> tuple[list[WorkerLoad], float]:
    """Each worker's busy share of the hop span (first hop start to last hop end), and the span.

    ``others``: hops of other studies (other regions' too); the part of each
    that falls in the span counts as the worker's time on other studies, so a
    worker that served another region does not look idle.
    """
    if not intervals:
        return [], 0.0
    origin = min(start for _, start, _, _ in intervals)
    end_of_span = max(end for _, _, end, _ in intervals)
    span = (end_of_span - origin).total_seconds()
    busy: dict[str, list[float]] = {}
    for hop, start, end, _ in intervals:
        busy.setdefault(hop.worker, []).append((end - start).total_seconds())
    elsewhere: dict[str, float] = {}
    mine = {hop.id for hop, _, _, _ in intervals}
    for hop in others:
        if hop.id in mine or hop.worker is None or hop.started_at is None \
                or hop.finished_at is None or hop.state != "done":
            continue
        overlap = (min(hop.finished_at, end_of_span) - max(hop.started_at, origin))
        if overlap.total_seconds() > 0:
            elsewhere[hop.worker] = elsewhere.get(hop.worker, 0.0) + overlap.total_seconds()
    names = sorted(set(busy) | set(elsewhere), key=_natural)
    loads = [WorkerLoad(w, len(busy.get(w, [])), sum(busy.get(w, [])),
                        sum(busy.get(w, [])) / span if span > 0 else 1.0,
                        elsewhere.get(w, 0.0) / span if span > 0 else 0.0)
             for w in names]
    return loads, span


def _gantt_data(hops: Sequence[HopRow], number_of: dict[int, int], live: set[int],
                now: datetime, records: HopRecords | None = None
                ) -> tuple[list[Bar], list[WorkerLoad], float]:
    intervals = _intervals(hops, live, now)
    if not intervals:
        return [], [], 0.0
    origin = min(start for _, start, _, _ in intervals)
    others = records.since(origin) if records is not None else []
    loads, span = _loads(intervals, [h for h in others if h.trial_id not in number_of])
    bars = [Bar(hop.worker, (start - origin).total_seconds(), (end - origin).total_seconds(),
                number_of[hop.trial_id], hop.shard, running)
            for hop, start, end, running in intervals]
    return bars, loads, span


def _natural(text: str) -> list[Any]:
    """Sort key that puts w2 before w10."""
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", text)]


def read_champions(store: Store, region: str) -> tuple[list[Card], str | None]:
    """The region's promoted versions (oldest first) and the current champion's version.

    A registry that cannot be read gives ``([], None)``: the report says "no
    champion yet" rather than failing.
    """
    try:
        cards = versions(store, region)
        current = champion_version(store, region)
    except (StoreError, OSError, ValueError, KeyError):
        return [], None
    return [_card(raw, raw.get("version", "")) for raw in cards], current


def _card(raw: dict[str, Any], folder: str) -> Card:
    return Card(
        version=str(raw.get("version") or folder),
        created_at=_instant(raw.get("created_at")),
        metric=float(raw["metric"]) if _finite(raw.get("metric")) else None,
        previous=raw.get("previous") if isinstance(raw.get("previous"), str) else None,
        previous_metric=(float(raw["previous_metric"]) if _finite(raw.get("previous_metric"))
                         else None),
        study_id=raw.get("study_id"),
        trial_number=raw.get("trial_number"),
    )


def _instant(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


# The page ------------------------------------------------------------------

_CSS = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1000px; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; vertical-align: top; }
th { background: #f0f0f0; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
img { max-width: 100%; border: 1px solid #eee; }
.note { color: #555; }
"""


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _fmt(value: Any) -> str:
    """A number or value as the report prints it: 4 significant digits, "—" for none."""
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, datetime):
        return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    if isinstance(value, dict):
        return ", ".join(f"{k}={_fmt(v)}" for k, v in value.items())
    return str(value)


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]],
           numeric: Sequence[int] = ()) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = "".join(
        "<tr>" + "".join(f'<td class="num">{_e(_fmt(c))}</td>' if i in numeric
                         else f"<td>{_e(_fmt(c))}</td>" for i, c in enumerate(row)) + "</tr>"
        for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _img(key: str, alt: str) -> str:
    return f'<p><img src="{_e(PLOTS[key])}" alt="{_e(alt)}"></p>'


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}"


def _page(study: StudyRow, trials: list[TrialRow], results: list[TrialResult],
          best: TrialRow | None, hops: list[HopRow], loads: list[WorkerLoad],
          span: float, cards: list[Card], current: str | None, metric_name: str,
          now: datetime, select: str = "best") -> str:
    region = study.region
    by_number = {r.number: r for r in results}
    chosen = by_number.get(best.number) if best else None
    counts = {s: sum(t.state == s for t in trials) for s in TRIAL_STATES}
    done_hops = sum(h.state == "done" for h in hops)
    redelivered = sum(max(h.deliveries - 1, 0) for h in hops)
    interrupted = sum(h.interrupted for h in hops)
    direction = "minimize" if study.minimize else "maximize"
    summary = [
        ("region", region), ("study", study.id), ("state", study.state),
        ("created", study.created_at), ("finished", study.finished_at),
        ("budget", f"{study.budget} trials, {study.parallel} at a time, "
                   f"up to {study.epochs} epochs"),
        ("trials by state", ", ".join(f"{s} {counts[s]}" for s in TRIAL_STATES)),
        ("metric", f"validation {metric_name} ({direction})"),
        ("best trial", best.number if best else None),
        (f"best {metric_name}", chosen.metric if chosen else None),
        ("its selected epoch", f"{chosen.selected} (select = {select!r}; epochs numbered "
                               f"from 1)" if chosen and chosen.selected else None),
        ("best params", best.params if best else None),
        ("wall time (first hop start to last hop end)", _duration(span) if loads else None),
        ("hops", f"{done_hops} done of {len(hops)}; {redelivered} redelivered, "
                 f"{interrupted} interrupted"),
    ]
    champion = next((c for c in cards if c.version == current), None)
    summary.append(("region's champion", "none yet" if champion is None else
                    f"{champion.version}: {metric_name} {_fmt(champion.metric)}, "
                    f"from study {_fmt(champion.study_id)}"))
    if study.parent_id is not None:
        summary.append(("warm-started from study", study.parent_id))
    if study.failure:
        summary.append(("failure", study.failure))
    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        f"<title>hoptune report: {_e(region)}, study {_e(study.id)}</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>Region {_e(region)}, study {_e(study.id)}</h1>",
        f'<p class="note">Report written {_e(_fmt(now))}.</p>',
        "<h2>Summary</h2>",
        "<table><tbody>" + "".join(f"<tr><th>{_e(k)}</th><td>{_e(_fmt(v))}</td></tr>"
                                   for k, v in summary) + "</tbody></table>",
        "<h2>Optimization history</h2>",
        f'<p class="note">Each finished or pruned trial\'s validation {_e(metric_name)} at its '
        f"selected epoch (select = {_e(repr(select))}: "
        + ("its best epoch" if select == "best" else "its last epoch")
        + "), the number the tables, the registry and <code>hoptune status</code> show, "
        "and the best so far.</p>",
        _img("history", "optimization history"),
        "<h2>Hyperparameters</h2>",
        _img("params", "hyperparameters against the metric"),
        "<h2>Learning curves</h2>",
        '<p class="note">Every epoch\'s validation metric; the ring marks each trial\'s '
        "selected epoch, whose metric the history above shows.</p>",
        _img("curves", "learning curves"),
        _failed(trials),
        "<h2>Trials</h2>",
        _table(["trial", "state", "params", "epochs", f"{metric_name} (selected epoch)",
                "selected epoch", f"last epoch's {metric_name}", "failure"],
               [(t.number, t.state, t.params, t.epochs_done, by_number[t.number].metric,
                 by_number[t.number].selected, t.last_metric, t.failure) for t in trials],
               numeric=(0, 3, 4, 5, 6)),
        "<h2>Workers</h2>",
        _workers(loads, span),
        _img("gantt", "hops per worker over time"),
        "<h2>Champion history</h2>",
        _img("champions", "champion history"),
        _champions(cards, current, region, metric_name),
        "</body></html>",
    ]
    return "\n".join(parts) + "\n"


def _failed(trials: list[TrialRow]) -> str:
    failed = [t for t in trials if t.state == "failed"]
    if not failed:
        return ""
    items = "".join(f"<li>trial {_e(t.number)}: {_e(t.failure or 'no reason recorded')}"
                    "</li>" for t in failed)
    return f"<p>Failed trials:</p><ul>{items}</ul>"


def _workers(loads: list[WorkerLoad], span: float) -> str:
    if not loads:
        return '<p class="note">No hop has finished yet.</p>'
    rows = [(w.worker, w.hops, _duration(w.busy_seconds), f"{w.share:.1%}",
             f"{w.other_share:.1%}") for w in loads]
    return (f'<p class="note">The hops of this study, and the time each worker spent on '
            f"other studies' hops (this region's or other regions') within this study's hop "
            f"span ({_e(_duration(span))}): a worker that served another region is busy, "
            f"not idle. Busy share: the sum of a worker's hop durations over that span.</p>"
            + _table(["worker", "hops of this study", "busy", "busy share",
                      "busy on other studies"], rows, numeric=(1, 2, 3, 4)))


def _champions(cards: list[Card], current: str | None, region: str, metric_name: str) -> str:
    if not cards:
        return f"<p>Region {_e(region)} has no champion yet.</p>"
    rows = [(c.version + (" (champion)" if c.version == current else ""), c.created_at,
             c.study_id, c.trial_number, c.metric, c.previous, c.previous_metric)
            for c in reversed(cards)]
    return _table(["version", "promoted", "study", "trial", metric_name, "previous champion",
                   f"previous champion's {metric_name} on the same data"], rows,
                  numeric=(2, 3, 4, 6))
