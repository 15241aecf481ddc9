"""The study report: a realistic study written through StudyDB, rendered, its PNGs decoded."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import hoptune.tuner._hop_queue
import hoptune.tuner._hop_records
import hoptune.tuner._report
import hoptune.tuner._studydb
from hoptune.core import Store, StudyError
from hoptune.regions import RegionConfig
from hoptune.tuner import HopRecords, StudyDB, StudyRow
from hoptune.tuner._plots import Dim
from hoptune.tuner._report import PLOTS, _dims, write_report
from hoptune.tuner._space import parse_space

BASE = datetime(2025, 6, 1, 2, 0, tzinfo=UTC)
SPACE = {
    "lr": {"type": "real", "low": 1e-3, "high": 0.3, "prior": "log"},
    "embedding_dim": {"type": "int", "low": 8, "high": 64},
    "reg": {"type": "real", "low": 1e-5, "high": 1e-1, "prior": "log"},
    "weight_decay": {"type": "categorical", "choices": [0.0, 0.01, 0.1]},
}
W0, W1 = "w0@test-host", "w1@test-host"
SHARD_SECONDS = {0: 12.0, 1: 8.0}  # shard 0 is bigger: worker w0 is the busier one


class Clock:
    """Stands in for the database's clock, so every timestamp of the study is chosen."""

    def __init__(self) -> None:
        self.now = BASE

    def __call__(self) -> datetime:
        return self.now

    def at(self, seconds: float) -> None:
        self.now = BASE + timedelta(seconds=seconds)

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(hoptune.tuner._studydb, "utcnow", fake)
    monkeypatch.setattr(hoptune.tuner._hop_records, "utcnow", fake)
    monkeypatch.setattr(hoptune.tuner._hop_queue, "utcnow", fake)
    monkeypatch.setattr(hoptune.tuner._report, "utcnow", fake)
    return fake


@pytest.fixture
def db(tmp_path: Path) -> StudyDB:
    database = StudyDB(f"sqlite:///{tmp_path / 's.db'}")
    yield database
    database.dispose()


def _region_config(name: str = "north") -> dict:
    return RegionConfig(name=name, data="data/north.csv", family="rating_mf",
                        rating_range=(1.0, 5.0), space=SPACE).model_dump(mode="json")


@dataclass
class Plan:
    """A trial's fate: its validation metric per epoch, and how it ends."""

    params: dict
    metrics: list[float]
    end: str  # done, pruned, failed, or running (left unfinished)
    failure: str | None = None
    ids: list[int] = field(default_factory=list)


def _run_pair(db: StudyDB, clock: Clock, study: StudyRow, pair: list[Plan], t: float,
              workers: dict[int, str]) -> float:
    """Train two concurrent trials epoch by epoch, hop by hop; returns the time after them.

    The first trial visits shards [0, 1], the second [1, 0], so with two
    workers they train side by side; a worker runs one hop at a time.
    """
    orders = [[0, 1], [1, 0]]
    free = dict.fromkeys(workers.values(), t)
    for epoch in range(study.epochs):
        active = [(p, orders[i]) for i, p in enumerate(pair) if len(p.ids) == 1]
        if not active:
            break
        clock.at(t)
        for plan, order in active:
            db.start_epoch(plan.ids[0], epoch, order)
        stuck: set[int] = set()  # trials whose hop started and never finished
        for position in range(2):
            round_start = t
            for plan, order in active:
                if plan.ids[0] in stuck:
                    continue
                shard, worker = order[position], workers[order[position]]
                begin = max(round_start, free[worker])
                clock.at(begin)
                HopRecords(db).claim(plan.ids[0], epoch, position, shard, worker=worker,
                                     holder=worker, live_after=BASE)
                if plan.end in ("failed", "running") and epoch == len(plan.metrics):
                    stuck.add(plan.ids[0])
                    continue
                free[worker] = begin + SHARD_SECONDS[shard]
                clock.at(free[worker])
                HopRecords(db).finish(plan.ids[0], epoch, position, next_hop=None, samples=4000,
                                      loss=0.5, train_seconds=SHARD_SECONDS[shard] - 1,
                                      load_seconds=0.6, save_seconds=0.4)
            t = max(free.values())
        t += 1.0
        clock.at(t)
        for plan, order in active:
            if epoch < len(plan.metrics):
                ends = epoch + 1 == len(plan.metrics) and plan.end in ("done", "pruned")
                db.end_epoch(plan.ids[0], epoch, plan.metrics[epoch], minimize=True,
                             outcome=plan.end if ends else "continue",
                             next_order=None if ends else order)
                if ends:
                    plan.ids.append(-1)  # ended
            else:
                if plan.end == "failed":
                    db.end_trial(plan.ids[0], "failed", failure=plan.failure)
                plan.ids.append(-1)  # failed, or left running
        t += 1.0
        free = dict.fromkeys(free, t)
    return t


def build_study(db: StudyDB, clock: Clock, plans: list[Plan], *, workers: int = 2,
                finish: bool = True, region: str = "north", tuned: bool = True) -> int:
    """A study of ``region`` whose trials follow ``plans``, two at a time.

    ``tuned`` studies search SPACE; the others train fixed configurations.
    """
    clock.at(-5)
    space = parse_space(SPACE, "test").to_json() if tuned else None
    study_id = db.create_study(region=region, budget=len(plans), parallel=2, epochs=3, seed=7,
                               region_config=_region_config(region), space=space,
                               data_hash="ab12")
    study = db.study(study_id)
    for plan in plans:
        plan.ids.extend(db.create_trials(study_id, [(plan.params, 100 + len(plan.ids))]))
    owners = {0: W0, 1: W1 if workers == 2 else W0}
    t = 0.0
    for i in range(0, len(plans), 2):
        t = _run_pair(db, clock, study, plans[i:i + 2], t, owners)
    if finish:
        clock.at(t)
        scored = [(min(p.metrics), p.ids[0]) for p in plans
                  if p.end == "done" and p.metrics and not any(map(math.isnan, p.metrics))]
        best = min(scored)[1] if scored else None
        db.finish_study(study_id, "failed" if best is None else "done", best_trial_id=best,
                        failure="every trial failed" if best is None else None)
    return study_id


def finished_plans() -> list[Plan]:
    return [
        Plan({"lr": 0.01, "embedding_dim": 16, "reg": 1e-3, "weight_decay": 0.0},
             [1.12, 0.98, 0.931], "done"),
        Plan({"lr": 0.2, "embedding_dim": 48, "reg": 1e-2, "weight_decay": 0.1},
             [1.41], "pruned"),
        Plan({"lr": 0.05, "embedding_dim": 32, "reg": 1e-4, "weight_decay": 0.01},
             [1.05, 0.93, 0.8731], "done"),
        Plan({"lr": 0.002, "embedding_dim": 8, "reg": 5e-2, "weight_decay": 0.1},
             [1.38], "pruned"),
        Plan({"lr": 0.29, "embedding_dim": 60, "reg": 2e-5, "weight_decay": 0.0},
             [1.2], "failed", "hop (epoch 1, position 0) delivered 4 times, last on worker "
                              f"{W0}: <redeliveries exhausted>"),
        Plan({"lr": 0.03, "embedding_dim": 24, "reg": 3e-4, "weight_decay": 0.01},
             [1.08, 0.95, 0.9012], "done"),
    ]


def write_registry(store: Store, region: str = "north") -> None:
    cards = [("v0001", "2025-05-20T02:41:00+00:00", 0.9512, None, None, 1, 3),
             ("v0002", "2025-05-27T02:38:00+00:00", 0.9104, "v0001", 0.9498, 4, 1)]
    for version, created, metric, previous, previous_metric, study, trial in cards:
        store.write_json(f"models/{region}/{version}/card.json", {
            "region": region, "version": version, "metric_name": "rmse", "metric": metric,
            "minimize": True, "study_id": study, "trial_id": 10 * study + trial,
            "trial_number": trial, "params": {"lr": 0.02}, "data_hash": "ab12",
            "created_at": created, "previous": previous, "previous_metric": previous_metric})
    store.write_json(f"models/{region}/champion.json",
                     {"version": "v0002", "updated_at": "2025-05-27T02:38:01+00:00"})


def decode(path: Path) -> np.ndarray:
    """The PNG's pixels (RGB), fully decoded."""
    with Image.open(path) as image:
        assert image.format == "PNG"
        return np.asarray(image.convert("RGB"), dtype=np.float64)


def assert_plot(path: Path, *, min_std: float = 12.0, min_colours: int = 3) -> None:
    pixels = decode(path)
    height, width, _ = pixels.shape
    assert 600 <= width <= 1600 and 200 <= height <= 1600, (path.name, width, height)
    assert pixels.std() > min_std, f"{path.name} looks blank (std {pixels.std():.1f})"
    centre = pixels[height // 5: -height // 5, width // 8: -width // 8].reshape(-1, 3)
    colours = len(np.unique(centre, axis=0))
    assert colours >= min_colours, f"{path.name}: {colours} colours in the plot area"


def test_finished_study_report(db: StudyDB, clock: Clock, tmp_path: Path) -> None:
    study_id = build_study(db, clock, finished_plans())
    store = Store(str(tmp_path / "store"))
    write_registry(store)

    index = write_report(db, store, "north", tmp_path / "report")

    assert index == tmp_path / "report" / "index.html"
    page = index.read_text()
    for name in PLOTS.values():
        assert_plot(index.parent / name)
        assert f'src="{name}"' in page
    assert sorted(p.name for p in index.parent.iterdir()) == sorted([*PLOTS.values(),
                                                                     "index.html"])
    # the best trial (number 2) and its metric, the trial counts, the failure (escaped)
    assert "best trial</th><td>2<" in page and "best rmse</th><td>0.8731<" in page
    assert "done 3, pruned 2, failed 1" in page
    assert "&lt;redeliveries exhausted&gt;" in page and "<redeliveries" not in page
    # busy shares, computed here from the hop rows: finished hops over the hop span
    hops = [h for h in HopRecords(db).all(study_id=study_id) if h.state == "done"]
    start = min(h.started_at for h in hops)
    span = (max(h.finished_at for h in hops) - start).total_seconds()
    for worker in (W0, W1):
        busy = sum((h.finished_at - h.started_at).total_seconds() for h in hops
                   if h.worker == worker)
        assert re.search(f"<td>{worker}</td>.*?<td class=\"num\">{busy / span:.1%}</td>",
                         page)
    # the champion table: both versions, the current one marked, the previous metric
    assert "v0002 (champion)" in page and "v0001" in page and "0.9498" in page
    assert "v0002: rmse 0.9104, from study 4" in page
    assert "no champion yet" not in page


def test_report_without_registry_says_no_champion(db: StudyDB, clock: Clock,
                                                 tmp_path: Path) -> None:
    build_study(db, clock, finished_plans()[:2])
    index = write_report(db, Store(str(tmp_path / "empty-store")), "north", tmp_path / "r")
    assert "no champion yet" in index.read_text()
    assert_plot(index.parent / PLOTS["champions"], min_std=5.0, min_colours=2)


def test_running_study_single_worker_failures_and_nan(db: StudyDB, clock: Clock,
                                                      tmp_path: Path) -> None:
    """Partial data: a running hop, a pending trial with no epoch, a NaN metric, one worker."""
    plans = [
        Plan({"lr": 0.01, "embedding_dim": 16, "reg": 1e-3, "weight_decay": 0.0},
             [float("nan")], "failed", "validation rmse is nan after epoch 0"),
        Plan({"lr": 0.1, "embedding_dim": 40, "reg": 1e-2, "weight_decay": 0.1},
             [1.3, 1.1], "running"),
        Plan({"lr": 0.02, "embedding_dim": 20, "reg": 1e-4, "weight_decay": 0.01}, [], "running"),
    ]
    study_id = build_study(db, clock, plans[:2], workers=1, finish=False)
    db.create_trials(study_id, [(plans[2].params, 5)])
    clock.advance(30)

    index = write_report(db, Store(str(tmp_path / "store")), "north", tmp_path / "r")

    page = index.read_text()
    assert "<td>running</td>" in page and "pending 1, running 1" in page
    assert "validation rmse is nan after epoch 0" in page
    for name in PLOTS.values():
        assert_plot(index.parent / name, min_std=5.0, min_colours=2)
    # one worker; its running hop counts up to the report's time, the failed trial's does not
    hops = HopRecords(db).all(study_id=study_id)
    (open_hop,) = [h for h in hops if h.state == "running"
                   and h.trial_id == plans[1].ids[0]]
    done = [h for h in hops if h.state == "done"]
    busy = sum((h.finished_at - h.started_at).total_seconds() for h in done)
    busy += (clock.now - open_hop.started_at).total_seconds()
    span = (clock.now - min(h.started_at for h in done)).total_seconds()
    assert page.count(f"<td>{W0}</td>") == 1 and f"{busy / span:.1%}" in page
    assert busy / span < 1


def test_all_trials_failed(db: StudyDB, clock: Clock, tmp_path: Path) -> None:
    plans = [Plan({"lr": 0.3, "embedding_dim": 8, "reg": 0.1, "weight_decay": 0.0}, [],
                  "failed", f"worker {W0} lost")]
    study_id = build_study(db, clock, plans)
    assert db.study(study_id).state == "failed"
    index = write_report(db, Store(str(tmp_path / "store")), "north", tmp_path / "r")
    page = index.read_text()
    assert "every trial failed" in page and f"worker {W0} lost" in page
    assert "No hop has finished yet" in page
    for name in PLOTS.values():
        assert_plot(index.parent / name, min_std=5.0, min_colours=2)


def test_fixed_study_plots_the_params_that_vary(db: StudyDB, clock: Clock,
                                                 tmp_path: Path) -> None:
    plans = [Plan({"lr": lr, "embedding_dim": 32, "reg": 1e-3, "activation": act},
                  [1.1, 0.95, metric], "done")
             for lr, act, metric in [(0.001, "relu", 0.93), (0.3, "tanh", 0.91),
                                     (0.01, "relu", 0.9)]]
    study_id = build_study(db, clock, plans, tuned=False)
    dims = _dims(None, db.trials(study_id))
    assert dims == [Dim("activation", choices=("relu", "tanh")), Dim("lr", log=True)]
    index = write_report(db, Store(str(tmp_path / "store")), "north", tmp_path / "r")
    assert_plot(index.parent / PLOTS["params"])
    assert "no champion yet" in index.read_text()


def test_no_study_is_one_line_error_and_writes_nothing(db: StudyDB, clock: Clock,
                                                       tmp_path: Path) -> None:
    out = tmp_path / "r"
    with pytest.raises(StudyError) as info:
        write_report(db, Store(str(tmp_path / "store")), "north", out)
    assert "\n" not in str(info.value) and "'north'" in str(info.value)
    assert not out.exists()
    other = build_study(db, clock, finished_plans()[:1], region="south")
    with pytest.raises(StudyError, match=f"study {other} is of region 'south'"):
        write_report(db, Store(str(tmp_path / "store")), "north", out, study_id=other)
    assert not out.exists()


def test_the_workers_section_counts_the_hops_of_other_regions(db: StudyDB, clock: Clock,
                                                               tmp_path: Path) -> None:
    """Workers that trained another region's hops meanwhile are busy, not idle: said so."""
    north = build_study(db, clock, finished_plans()[:2], region="north")
    build_study(db, clock, finished_plans()[:2], region="south")  # the same times and workers
    page = write_report(db, Store(str(tmp_path / "store")), "north", tmp_path / "r").read_text()
    assert "busy on other studies</th>" in page and "other regions" in page
    hops = [h for h in HopRecords(db).all(study_id=north) if h.state == "done"]
    start = min(h.started_at for h in hops)
    span = (max(h.finished_at for h in hops) - start).total_seconds()
    for worker in (W0, W1):
        share = sum((h.finished_at - h.started_at).total_seconds() for h in hops
                    if h.worker == worker) / span
        # south's hops ran at the same times on the same workers: the same share again
        assert re.search(f"<td>{worker}</td>.*?<td class=\"num\">{share:.1%}</td>"
                         f"<td class=\"num\">{share:.1%}</td>", page), worker


def test_few_promotions_are_points_on_ticks_that_show_their_dates() -> None:
    from matplotlib.figure import Figure

    from hoptune.tuner._plots import FEW_PROMOTIONS, Card, draw_champions

    t0 = datetime(2026, 11, 26, 8, 30, 5, tzinfo=UTC)
    cards = [Card("v0001", t0, 0.9), Card("v0002", t0 + timedelta(seconds=30), 0.85, "v0001",
                                          0.9)]
    ax = Figure().add_subplot()
    draw_champions(ax, cards, metric_name="rmse", minimize=True, now=t0 + timedelta(days=2))
    assert ax.get_lines() == []  # points, no step line stretched to today
    assert [t.get_text() for t in ax.get_xticklabels()] == ["2026-11-26\n08:30:05",
                                                           "2026-11-26\n08:30:35"]
    many = [Card(f"v{i + 1:04d}", t0 + timedelta(days=i), 0.9 - i / 100)
            for i in range(FEW_PROMOTIONS + 2)]
    ax = Figure().add_subplot()
    draw_champions(ax, many, metric_name="rmse", minimize=True, now=t0 + timedelta(days=9))
    assert len(ax.get_lines()) == 1  # the champion's step line over the dates
