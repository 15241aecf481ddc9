"""`hoptune plan` as a user runs it, on a region whose study finished and on one with no history."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hoptune.core import ConfigError, Store, StudyError, parse_duration
from hoptune.regions import ingest, load_config
from hoptune.tasks import create_study, run_inline, tune_step
from hoptune.tasks.cli._calibrate import CALIBRATION_TRIALS
from hoptune.tasks.plan._plan import Planner, trial_sizes
from hoptune.tuner import HopRecords, default_initial_points, parse_space


def hoptune(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hoptune.tasks.cli", *args], cwd=cwd, text=True,
                          capture_output=True, env=os.environ.copy(), timeout=240)


@pytest.fixture
def finished(make_config, rt, home):  # noqa: ANN001, ANN201 - the config path
    path = make_config(shards=2, epochs=2, trials=4, parallel=2)
    region = load_config(path).region("north")
    manifest = ingest(region, Store(rt.settings.store_url)).manifest
    study = create_study(rt, region, manifest=manifest,
                         configs=[{"lr": 0.03}, {"lr": 0.01, "embedding_dim": 16}])
    run_inline(rt, tune_step(rt, study))
    assert rt.db.study(study).state == "done"
    return path


def test_the_deadline_gets_the_fewest_workers_the_simulator_says_meet_it(finished, rt, home
                                                                          ) -> None:
    planner = Planner(rt, load_config(finished), ["north"])
    alone, pair = planner.wall(1), planner.wall(2)
    assert pair < alone  # two shards: a second worker helps
    deadline = (alone + pair) / 2  # one worker misses it, two meet it
    done = hoptune("--config", str(finished), "plan", "north", "--deadline", f"{deadline:.6f}",
                   "--json", cwd=home)
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout.strip().splitlines()[-1])
    n = plan["workers"]
    assert n == 2
    assert planner.wall(n) <= plan["deadline_seconds"] < planner.wall(n - 1)
    assert plan["wall_seconds"] == planner.wall(n)
    assert plan["low_seconds"] <= plan["wall_seconds"] <= plan["high_seconds"]
    assert plan["regions"] == ["north"] and plan["hops"] > 0


def test_where_rungs_prune_the_range_spans_the_orders_of_the_metrics_too(finished, rt
                                                                          ) -> None:
    """How many hops ASHA keeps moves from order to order of the trials' metrics: the range
    holds those draws' tails as well as the cost model's spread; without rungs, only that."""
    from dataclasses import replace

    # one bracket: in 2 epochs, trials of the later brackets are never judged, and 4 trials
    # leave too few judged ones to prune differently from order to order
    finished.write_text(finished.read_text().replace("min_epochs = 1",
                                                     "min_epochs = 1\nbrackets = 1"))
    planner = Planner(rt, load_config(finished), ["north"])
    (inputs,) = planner.inputs
    assert inputs.region.space and inputs.region.pruner.min_epochs < inputs.epochs  # rungs
    assert inputs.region.pruner.brackets == 1
    spread = inputs.cost.spread
    walls = [r.wall_seconds for r in planner._draws(2)]
    assert len(set(walls)) > 1  # the orders prune differently
    p = planner.plan(2)
    cheap, dear = planner._run(2, max(0.0, 1 - spread)), planner._run(2, 1 + spread)
    assert p.low_seconds <= cheap.wall_seconds and dear.wall_seconds <= p.high_seconds
    assert p.high_seconds - p.low_seconds > dear.wall_seconds - cheap.wall_seconds
    assert p.low_seconds <= p.wall_seconds <= p.high_seconds
    # the same region planned without rungs: one draw, the cost model's range alone
    fixed = replace(inputs, region=inputs.region.model_copy(update={"space": None}))
    planner.inputs = [fixed]
    p = planner.plan(2)
    assert len(planner._draws(2)) == 1
    assert (p.low_seconds, p.high_seconds) == (planner._run(2, max(0.0, 1 - spread)).wall_seconds,
                                               planner._run(2, 1 + spread).wall_seconds)


_COUNT = """
import json, sys
import torch
from hoptune.regions import RegionConfig, get_family
from hoptune.regions._meta_build import NoValuesDrawn
from hoptune.tasks.plan._costs import parameter_count
config, manifest, params = json.loads(sys.argv[1])
counted = parameter_count(config, manifest, params)
after_count = "torch._dynamo" in sys.modules
with torch.device("meta"), NoValuesDrawn():  # a factory's own draws, by method and by nn.init
    torch.nn.init.normal_(torch.empty(4).normal_(), std=0.1)
after_draws = "torch._dynamo" in sys.modules
with NoValuesDrawn():  # a real tensor still draws its values
    real = torch.zeros(1000).normal_()
built = get_family(RegionConfig.model_validate(config)).build(params, manifest["meta"])
print(json.dumps([counted, sum(p.numel() for p in built.parameters()), after_count,
                  after_draws, float(real.std())]))
"""


def test_a_models_size_is_counted_without_drawing_its_values_or_loading_the_compiler(
        finished, rt) -> None:
    """In a fresh process, as ``hoptune plan`` counts it: the count a real build gives, and
    torch's compiler stack (seconds to import) left unloaded."""
    study = rt.db.latest_study("north")
    params = {"embedding_dim": 24, "lr": 0.01, "reg": 0.001}
    done = subprocess.run([sys.executable, "-c", _COUNT, json.dumps(
        [study.region_config, study.manifest, params])], capture_output=True, text=True,
        timeout=300, check=True)
    counted, built, after_count, after_draws, spread = json.loads(done.stdout.splitlines()[-1])
    assert counted == built and counted > 0
    assert not after_count and not after_draws
    assert 0.8 < spread < 1.2  # a thousand standard normal draws, not left at zero


def test_a_tuned_regions_hops_are_costed_at_its_trials_mean_size(finished, rt) -> None:
    from hoptune.tasks.plan._costs import parameter_count

    region = load_config(finished).region("north")
    study = rt.db.latest_study("north")
    sizes = [{**region.params, **p} for p in trial_sizes(region)]
    assert len(sizes) == region.trials and len({p["embedding_dim"] for p in sizes}) > 1
    (inputs,) = Planner(rt, load_config(finished), ["north"]).inputs
    expected = sum(parameter_count(study.region_config, study.manifest, p)
                   for p in sizes) / len(sizes)
    assert inputs.parameters == pytest.approx(expected, rel=1e-12)
    assert inputs.parameters != parameter_count(study.region_config, study.manifest,
                                                region.params)  # not the defaults'
    assert inputs.batch_size == region.batch_size  # not in the space: every trial's


def test_a_plan_starts_the_model_s_proposals_after_the_warm_start_s_results(finished,
                                                                            rt) -> None:
    from hoptune.tasks.plan._plan import _studies

    parent = rt.db.latest_study("north", state="done")
    told = [t for t in rt.db.trials(parent.id) if t.state in ("done", "pruned")]
    assert len(told) == 2  # each inside the space, with a finite metric
    planner = Planner(rt, load_config(finished), ["north"])
    (inputs,) = planner.inputs
    # the next study of north starts from its 2 results: 4 more of the 6 initial points
    # (two dimensions) and its optimizer proposes from the model
    assert inputs.design_left == 6 - 2
    (study,) = _studies(planner.inputs, 1.0)
    assert study.design_left == 4
    # the study itself ran the configurations it was given: it proposed nothing
    assert parent.space is None
    assert Planner.under_way(rt.db, [parent]).inputs[0].design_left is None


def test_a_deadline_no_worker_count_meets_is_one_line(finished, rt, home) -> None:
    fastest = min(Planner(rt, load_config(finished), ["north"]).wall(n) for n in range(1, 5))
    done = hoptune("--config", str(finished), "plan", "north", "--deadline",
                   f"{fastest / 2:.6f}", cwd=home)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("hoptune: error: no worker count up to 4 meets the deadline")
    assert done.stderr.strip().count("\n") == 0


def test_a_plan_for_n_workers_prints_the_prediction(finished, home) -> None:
    done = hoptune("--config", str(finished), "plan", "north", "--workers", "2", cwd=home)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("2 worker(s): ") and "busy share" in done.stdout
    night = hoptune("--config", str(finished), "plan", "--nightly", "--workers", "1", "--json",
                    cwd=home)
    assert night.returncode == 0, night.stderr
    assert json.loads(night.stdout)["workers"] == 1


def test_without_recorded_hops_the_plan_says_what_to_do(make_config, home) -> None:
    path = make_config()
    done = hoptune("--config", str(path), "plan", "north", "--workers", "2", cwd=home)
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0
    assert "no recorded hops of family 'rating_mf'" in done.stderr
    assert done.stdout == ""


@pytest.mark.parametrize(("text", "seconds"), [("6h", 21600.0), ("1h30m", 5400.0),
                                                ("90m", 5400.0), ("45s", 45.0), ("2.5", 2.5)])
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["6x", "h", "0", "-1h", "6h banana"])
def test_bad_durations_name_the_option(text: str) -> None:
    with pytest.raises(ConfigError, match="^--deadline: "):
        parse_duration(text, "--deadline")


@pytest.mark.parametrize(("deadline", "warned"), [("0.001", True), ("30d", False)])
def test_a_nightly_run_logs_its_plan_and_warns_at_once_of_a_miss(
        finished, home, monkeypatch, caplog, deadline: str, warned: bool) -> None:
    from hoptune.core import Settings
    from hoptune.tasks import Runtime
    from hoptune.tasks.plan._nightly import log_nightly_plan
    from hoptune.tasks.study._nightly import start_nightly

    monkeypatch.setenv("HOPTUNE_NIGHTLY_DEADLINE", deadline)
    rt = Runtime(Settings.from_env(), worker="test")
    assert rt.settings.nightly_deadline == parse_duration(deadline)
    config = load_config(finished)
    run_id, dispatches = start_nightly(rt, config, trigger="test")
    with caplog.at_level("INFO", logger="hoptune.tasks.plan._nightly"):
        plan = log_nightly_plan(rt, config, run_id, workers=1)
    rt.db.dispose()
    assert len(dispatches) == 1 and plan is not None
    plans = [r.getMessage() for r in caplog.records if r.levelname == "INFO"]
    assert plans == [m for m in plans if m.startswith(f"nightly run {run_id} plan: 1 worker(s): ")]
    assert len(plans) == 1
    misses = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(misses) == int(warned)
    if warned:
        assert misses[0].startswith(f"nightly run {run_id}: predicted to miss its deadline")


def test_a_nights_plan_is_made_from_what_was_known_before_it(finished, rt, caplog) -> None:
    """The plan is logged once the night's messages are sent, so no study waits for it; a
    night whose studies started, or tiny ones ended, before it gets the plan it would have
    had at its start: its own studies' hops and gaps are not learnt from."""
    from hoptune.tasks.plan._nightly import log_nightly_plan, nightly_plan
    from hoptune.tasks.study._nightly import start_nightly

    config = load_config(finished)
    before = Planner(rt, config, ["north"]).plan(1)
    run_id, dispatches = start_nightly(rt, config, trigger="test")
    run_inline(rt, dispatches)
    study = rt.db.study(dispatches[0].kwargs["study"])
    assert study.state == "done" and study.nightly_run_id == run_id
    assert HopRecords(rt.db).all(study_id=study.id)  # hops the plan must not learn from
    assert log_nightly_plan(rt, config, run_id, workers=1) == before
    assert Planner(rt, config, ["north"]).plan(1) != before  # as they would change it
    with caplog.at_level("INFO", logger="hoptune.tasks.plan._nightly"):
        assert nightly_plan(rt, config, [], run_id=7) is None
    assert [r.getMessage() for r in caplog.records] == [
        "nightly run 7: no plan: no region started"]
    with pytest.raises(StudyError, match="nothing to plan"):
        Planner(rt, config, []).plan(1)


def test_a_bad_nightly_deadline_names_the_variable() -> None:
    from hoptune.core import Settings

    with pytest.raises(ConfigError, match="^HOPTUNE_NIGHTLY_DEADLINE: 'soon' is not a duration"):
        Settings.from_env({"HOPTUNE_NIGHTLY_DEADLINE": "soon"})
    assert Settings.from_env({}).nightly_deadline is None


@pytest.mark.parametrize(("args", "message"), [
    (["north"], "plan: give --workers N or --deadline DURATION"),
    (["north", "--workers", "2", "--deadline", "6h"], "plan: give --workers N or --deadline"),
    (["--workers", "2"], "plan: name one REGION or --nightly"),
    (["north", "--nightly", "--workers", "2"], "plan: name one REGION or --nightly"),
    (["north", "--deadline", "soon"], "--deadline: 'soon' is not a duration"),
])
def test_bad_plan_arguments_are_one_line(home, args: list[str], message: str) -> None:
    done = hoptune("plan", *args, cwd=home)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("hoptune: error: ") and done.stderr.count("\n") == 1
    assert message in done.stderr


def test_calibration_records_the_hop_costs_a_plan_needs_and_is_never_promoted(
        make_config, rt, home) -> None:
    path = make_config(shards=2, trials=4, parallel=4)
    # a region that fuses: calibration trains single hops all the same (a cohort's pass is
    # no hop's cost)
    path.write_text(path.read_text().replace("[defaults]\n", "[defaults]\nfuse = 4\n", 1))
    before = hoptune("--config", str(path), "plan", "north", "--workers", "2", cwd=home)
    assert before.returncode == 2 and "no recorded hops of family" in before.stderr

    done = hoptune("--config", str(path), "plan", "north", "--calibrate", "--local-workers",
                   "2", cwd=home)
    assert done.returncode == 0, done.stderr
    (study,) = rt.db.studies("north")
    assert done.stdout == (f"north: calibration study {study.id} recorded the hop costs of "
                           "rating_mf\n")
    assert (study.kind, study.state, study.epochs) == ("calibration", "done", 1)
    assert study.promotion == {"promoted": False,
                                  "reason": "a calibration study is never promoted"}
    assert not (home / "store" / "models" / "north").exists()
    # never a warm start nor the study a report shows
    assert rt.db.latest_study("north") is None
    assert rt.db.latest_study("north", kind=None).id == study.id
    # its trials spread over the space (a stratum of each dimension per trial): the
    # optimizer's initial design, the trials the planner costs a study's hops by
    trials = rt.db.trials(study.id)
    n = CALIBRATION_TRIALS
    assert len(trials) == n and {t.state for t in trials} == {"done"}
    assert len({t.params["lr"] for t in trials}) == n
    assert len({t.params["embedding_dim"] for t in trials}) > 1
    region = load_config(path).region("north")
    design = default_initial_points(parse_space(region.space, "space"))  # before the model
    assert [{k: t.params[k] for k in region.space} for t in trials[:design]] == \
        trial_sizes(region, design)
    assert HopRecords(rt.db).done_count(study.id) == n * 2
    seconds = [h.train_seconds for h in HopRecords(rt.db).all(study_id=study.id)]
    assert len(set(seconds)) == len(seconds) == n * 2  # every hop a pass of its own

    planned = hoptune("--config", str(path), "plan", "north", "--workers", "2", "--json",
                      cwd=home)
    assert planned.returncode == 0, planned.stderr
    plan = json.loads(planned.stdout)
    assert plan["workers"] == 2 and plan["wall_seconds"] > 0
    assert plan["costs"]["north"]["hops"] >= 2

    again = hoptune("--config", str(path), "plan", "north", "--calibrate", "--local-workers",
                    "2", cwd=home)
    assert again.returncode == 0, again.stderr
    assert again.stdout == ("north: this host class already has hop costs of rating_mf: "
                            "nothing to calibrate\n")
    assert len(rt.db.studies("north")) == 1
