"""The command line as a user runs it: a subprocess, real files, exit statuses, messages.

And its layout: one module per command, none of them importing heavy libraries at startup.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

CONFIG = """[defaults]
shards = 2
[regions.north]
data = "data/north.csv"
family = "rating_mf"
task = "rating"
columns = { user = "user_id", item = "item_id", rating = "rating" }
rating_range = [1.0, 5.0]
"""


def hoptune(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hoptune.tasks.cli", *args], cwd=cwd, text=True,
                          capture_output=True, env=os.environ.copy(), timeout=120)


def files(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")} if folder.exists() else set()


@pytest.fixture
def project(home: Path) -> Path:
    from hoptune.regions import write_ratings

    write_ratings(home / "data" / "north.csv", n_users=50, n_items=40, n_rows=500, rank=2,
                  noise=0.3, seed=1)
    (home / "hoptune.toml").write_text(CONFIG)
    return home


def test_console_script_is_installed() -> None:
    assert shutil.which("hoptune"), "pip install -e . puts `hoptune` on the PATH"


HEAVY = ("torch", "torchmetrics", "skopt", "sklearn", "scipy", "numpy", "pandas", "pyarrow",
         "celery", "kombu", "sqlalchemy", "pydantic")


def test_each_command_is_a_module_named_after_it() -> None:
    """``hoptune NAME`` lives in ``tasks/cli/_NAME.py``: its ``add_arguments`` and ``run``."""
    import hoptune.tasks.cli as cli

    assert list(cli.COMMANDS) == [
        "ingest", "worker", "up", "demo", "tune", "nightly", "beat", "models", "export",
        "predict", "report", "flower", "dashboard", "status", "doctor", "plan", "sweep", "metrics",
        "gc", "db"]
    for name, command in cli.COMMANDS.items():
        module = command.module
        # the planner is hoptune.tasks.plan; its command line is not a second planner
        expected = "_plan_command" if name == "plan" else f"_{name}"
        assert module.__name__ == f"hoptune.tasks.cli.{expected}"
        assert module.__doc__ and module.__doc__.startswith(f"``hoptune {name}"), name
        assert {"add_arguments", "run"} <= set(module.__all__), name
        assert callable(module.add_arguments) and callable(module.run)


def test_the_command_line_starts_without_the_heavy_libraries() -> None:
    """``--help`` and argument errors build every command's parser and import none of them."""
    code = ("import sys; from hoptune.tasks.cli import build_parser; build_parser(); "
            "print(' '.join(sorted({m.split('.')[0] for m in sys.modules})))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert not set(HEAVY) & set(done.stdout.split())


def test_the_lazy_names_still_load() -> None:
    import hoptune.tasks.cli as cli

    assert cli.assign_shards({"north": 2}, 2) == [[("north", 0)], [("north", 1)]]
    assert set(dir(cli)) >= {"main", "build_parser", "LocalCluster", "follow", "calibrate"}


def test_ingest_then_ingest_again_is_a_no_op(project: Path) -> None:
    first = hoptune("ingest", cwd=project)
    assert first.returncode == 0, first.stderr
    assert first.stdout.startswith("north: ingested, 400 training rows in 2 shards")
    written = files(project / "store")
    again = hoptune("ingest", cwd=project)
    assert again.returncode == 0
    assert again.stdout.startswith("north: unchanged")
    assert files(project / "store") == written


def _break_row(csv: Path, row: int, value: str) -> None:
    lines = csv.read_text().splitlines()
    user, item, _ = lines[row].split(",")
    lines[row] = f"{user},{item},{value}"
    csv.write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda p: _break_row(p / "data/north.csv", 6, "9"),
         "data/north.csv: column 'rating': row 6: value 9.0 outside rating_range [1.0, 5.0]"),
        (lambda p: _break_row(p / "data/north.csv", 3, ""),
         "data/north.csv: column 'rating': row 3: empty or NaN value"),
        (lambda p: _break_row(p / "data/north.csv", 2, "good"),
         "data/north.csv: column 'rating': row 2: 'good' is not a number"),
        (lambda p: (p / "hoptune.toml").write_text(CONFIG.replace('rating = "rating"',
                                                                  'rating = "score"')),
         "data/north.csv: column 'score': no such column (the file has: user_id, item_id, "
         "rating)"),
        (lambda p: (p / "data/north.csv").write_text("user_id,item_id,rating\n"),
         "data/north.csv: no data rows"),
        (lambda p: (p / "data/north.csv").unlink(),
         "data/north.csv: no such file"),
        (lambda p: (p / "hoptune.toml").write_text(CONFIG.replace("shards = 2", "shards = 0")),
         "hoptune.toml: defaults.shards: must be an integer >= 1 or 'auto', got 0"),
    ],
    ids=["out-of-range", "empty-cell", "wrong-type", "missing-column", "empty-region",
         "missing-file", "bad-config"],
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(project: Path, change, message) -> None:
    change(project)
    result = hoptune("ingest", cwd=project)
    assert result.returncode == 2
    assert result.stderr == f"hoptune: error: {message}\n"
    assert files(project / "store") == set()
    assert not (project / "studies.db").exists()


def test_bad_data_leaves_an_earlier_ingest_untouched(project: Path) -> None:
    assert hoptune("ingest", cwd=project).returncode == 0
    written = {p: (project / "store" / p).read_bytes() for p in files(project / "store")
               if (project / "store" / p).is_file()}
    before = files(project / "store")
    _break_row(project / "data/north.csv", 6, "9")
    assert hoptune("ingest", cwd=project).returncode == 2
    assert files(project / "store") == before
    assert {p: (project / "store" / p).read_bytes() for p in written} == written


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["ingest", "west"], "hoptune: error: hoptune.toml: no region 'west' (known: north)\n"),
        (["worker", "--shards", "north"],
         "hoptune: error: --shards: expected REGION:INDEX[,REGION:INDEX…], got 'north'\n"),
        (["worker", "--shards", "North:0"],
         "hoptune: error: --shards: bad region name 'North' (expected [a-z0-9_-]+)\n"),
    ],
)
def test_bad_arguments(project: Path, args: list[str], message: str) -> None:
    result = hoptune(*args, cwd=project)
    assert (result.returncode, result.stderr) == (2, message)


@pytest.mark.parametrize("command", [["worker", "--shards", "north:0"], ["up", "--workers", "1"]])
@pytest.mark.parametrize(("variable", "value", "message"), [
    ("HOPTUNE_CHAIN_SECONDS", "soon", "0 or more seconds, got 'soon'"),
    ("HOPTUNE_CUDA_GRAPHS", "sometimes", "one of auto, backward, off, got 'sometimes'"),
])
def test_a_bad_worker_setting_stops_a_worker_before_it_starts(
        project: Path, monkeypatch, command: list[str], variable: str, value: str,
        message: str) -> None:
    monkeypatch.setenv(variable, value)
    result = hoptune(*command, cwd=project)
    assert (result.returncode, result.stderr.splitlines()[-1]) == (
        2, f"hoptune: error: {variable}: {message}")


def test_argument_type_errors_exit_2(project: Path) -> None:
    result = hoptune("demo", "--workers", "0", cwd=project)
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1] == (
        "hoptune demo: error: argument --workers: must be >= 1, got 0")
    assert files(project / "store") == set()


SPACE = """[defaults.space]
lr = { type = "real", low = 0.001, high = 0.3, prior = "log" }
"""


@pytest.mark.parametrize(
    ("space", "message"),
    [
        ('lr = { type = "real", low = 0.3, high = 0.001, prior = "log" }',
         "hoptune.toml: regions.north.space.lr: low (0.3) must be < high (0.001)"),
        ('lr = { type = "real", low = 0.0, high = 0.1, prior = "log" }',
         "hoptune.toml: regions.north.space.lr: low (0.0) must be > 0 for prior 'log'"),
        ('act = { type = "categorical", choices = [] }',
         "hoptune.toml: regions.north.space.act: choices must not be empty"),
        ('lr = { type = "float", low = 0.1, high = 0.2 }',
         "hoptune.toml: regions.north.space.lr: unknown type 'float' "
         "(expected one of: categorical, int, real)"),
        # the family's names are checked before the data is ingested, not after
        ('batch_sise = { type = "int", low = 32, high = 256 }',
         "hoptune.toml: region 'north': space: family 'rating_mf' has no parameter "
         "'batch_sise' (did you mean 'batch_size'?) (known: amsgrad, batch_size, beta1, beta2, "
         "dampening, embedding_dim, "
         "epochs, eps, init_std, lr, lr_schedule, momentum, nesterov, optimizer, reg, "
         "warmup_epochs, weight_decay)"),
    ],
    ids=["low-not-below-high", "log-of-zero", "empty-choices", "unknown-type",
         "not-a-family-parameter"],
)
def test_tune_with_a_bad_space_writes_no_study(project: Path, space: str, message: str) -> None:
    (project / "hoptune.toml").write_text(CONFIG.replace("[regions.north]", f"""[defaults.space]
{space}

[regions.north]"""))
    result = hoptune("tune", "north", "--no-progress", cwd=project)
    assert (result.returncode, result.stderr) == (2, f"hoptune: error: {message}\n")
    assert files(project / "store") == set()
    from hoptune.tuner import StudyDB

    assert StudyDB(f"sqlite:///{project / 'studies.db'}").studies() == []


@pytest.mark.parametrize(
    ("args", "last_line"),
    [
        (["tune"], "hoptune tune: error: the following arguments are required: REGION"),
        (["tune", "north", "--trials", "0"],
         "hoptune tune: error: argument --trials: must be >= 1, got 0"),
        (["tune", "north", "--parallel", "two"],
         "hoptune tune: error: argument --parallel: expected a whole number, got 'two'"),
    ],
)
def test_tune_argument_errors(project: Path, args: list[str], last_line: str) -> None:
    result = hoptune(*args, cwd=project)
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1] == last_line
    assert not (project / "studies.db").exists()


def test_tune_unknown_region(project: Path) -> None:
    result = hoptune("tune", "west", cwd=project)
    assert (result.returncode, result.stderr) == (
        2, "hoptune: error: hoptune.toml: no region 'west' (known: north)\n")
    assert not (project / "studies.db").exists()


def test_a_bad_stop_bound_stops_before_anything_starts(project: Path, monkeypatch) -> None:
    with (project / "hoptune.toml").open("a") as f:
        f.write('space = { lr = { type = "real", low = 0.01, high = 0.1 } }\n')
    monkeypatch.setenv("HOPTUNE_STOP_SECONDS", "soon")
    result = hoptune("tune", "north", "--local-workers", "2", cwd=project)
    assert (result.returncode, result.stderr) == (
        2, "hoptune: error: HOPTUNE_STOP_SECONDS: 'soon' is not a duration such as 6h, 90m "
           "or 45s\n")
    assert files(project) == {"hoptune.toml", "data", "data/north.csv"}


def test_tune_without_a_live_owner_of_a_shard_says_which_and_how_to_serve_it(
        project: Path, redis_url: str, monkeypatch) -> None:
    with (project / "hoptune.toml").open("a") as f:
        f.write('space = { lr = { type = "real", low = 0.01, high = 0.1 } }\n')
    monkeypatch.setenv("HOPTUNE_BROKER_URL", redis_url)
    result = hoptune("tune", "north", "--detach", cwd=project)
    assert result.returncode == 0, result.stderr
    assert result.stderr == (
        "hoptune: warning: no live worker owns north's shard(s) 0, 1: their hops wait; start "
        "`hoptune up` or `hoptune worker --shards north:0,north:1`\n")
    # a live owner of shard 0 (its heartbeat row): only shard 1 is named
    from hoptune.core import Settings
    from hoptune.tuner import StudyDB, WorkerRecords

    db = StudyDB(Settings.from_env().database_url)
    WorkerRecords(db).register("w0-1", name="w0", host="here", pid=1, shards=[["north", 0]])
    db.dispose()
    result = hoptune("tune", "north", "--detach", cwd=project)
    assert result.returncode == 0, result.stderr
    assert "no live worker owns north's shard(s) 1: their hops wait" in result.stderr
    assert "--shards north:1`" in result.stderr


def test_local_workers_never_import_a_users_modules_of_the_same_names(project: Path) -> None:
    """A Celery project's own tasks.py (or tuner.py, …) in the working folder is not hoptune's."""
    with (project / "hoptune.toml").open("a") as f:
        f.write('epochs = 1\nspace = { lr = { type = "real", low = 0.01, high = 0.1 } }\n')
    for name in ("tasks", "tuner", "regions", "kernels", "core", "hoptune"):
        (project / f"{name}.py").write_text(f"raise RuntimeError('user module {name}.py ran')\n")
    done = subprocess.run(
        ["hoptune", "tune", "north", "--local-workers", "2", "--trials", "2", "--parallel", "2",
         "--no-progress"],
        cwd=project, text=True, capture_output=True, env=os.environ.copy(), timeout=240)
    output = done.stdout + done.stderr
    logs = "".join(p.read_text() for p in project.rglob("*.log"))
    assert "user module" not in output + logs
    assert done.returncode == 0, output

    from hoptune.tuner import StudyDB

    db = StudyDB(f"sqlite:///{project / 'studies.db'}", create=False)
    (study,) = db.studies("north")
    assert study.state == "done"
    assert db.counts(study.id)["done"] + db.counts(study.id)["pruned"] == 2
    db.dispose()


INHERITING = """[defaults]
shards = 2
family = "rating_mf"
columns = { user = "user_id", item = "item_id", rating = "rating" }
rating_range = [1.0, 5.0]
[regions.north]
data = "data/north.csv"
"""


def test_a_region_takes_its_family_columns_and_range_from_defaults(project: Path) -> None:
    (project / "hoptune.toml").write_text(INHERITING)
    done = hoptune("ingest", cwd=project)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("north: ingested, 400 training rows in 2 shards")


def test_a_bad_field_in_defaults_is_one_line_naming_it(project: Path) -> None:
    (project / "hoptune.toml").write_text(INHERITING.replace("[1.0, 5.0]", "\"high\""))
    done = hoptune("ingest", cwd=project)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "hoptune: error: hoptune.toml: defaults.rating_range: must be two numbers [low, high] "
        "with low < high, got 'high'"]
    assert not (project / "store").exists()


def test_the_global_options_stand_before_or_after_the_command(project: Path) -> None:
    other = project / "other"
    (other / "data").mkdir(parents=True)
    shutil.copy(project / "data" / "north.csv", other / "data" / "north.csv")
    (other / "hoptune.toml").write_text(CONFIG.replace("[regions.north]", "[regions.south]"))
    # --config after the command, as examples/hoptune.toml's run line puts it
    done = hoptune("ingest", "--config", "other/hoptune.toml", cwd=project)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("south: ingested")
    # given twice, the one after the command wins
    done = hoptune("--config", "nowhere.toml", "ingest", "--config", "other/hoptune.toml", "-v",
                   cwd=project)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("south: unchanged")
    # --home: HOPTUNE_HOME for the command (its store), before or after the command
    for args in (["ingest", "--home", "h1"], ["--home", "h2", "ingest"]):
        done = hoptune(*args, cwd=project)
        assert done.returncode == 0, done.stderr
    assert {p.split("/")[0] for p in files(project / "h1")} >= {"store"}
    assert any(p.startswith("store/") for p in files(project / "h2"))
    done = hoptune("plan", "north", "--workers", "2", "--config", "other/hoptune.toml",
                   cwd=project)
    assert (done.returncode, done.stderr) == (
        2, "hoptune: error: other/hoptune.toml: no region 'north' (known: south)\n")


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ('family = "rating_mf"', 'famly = "rating_mf"',
         "hoptune.toml: regions.north: unknown field 'famly' (did you mean 'family'?)"),
        ('family = "rating_mf"', 'family = "rating_m"',
         "hoptune.toml: regions.north.family: must be 'rating_mf', 'mlp' or "
         "'package.module:function', got 'rating_m' (did you mean 'rating_mf'?)"),
        ("[defaults]", "[defaults]\npruner = { reduction_factr = 2 }",
         "hoptune.toml: defaults.pruner: unknown field 'reduction_factr' "
         "(did you mean 'reduction_factor'?)"),
        ('columns = { user = "user_id"', 'columns = { usr = "user_id"',
         "hoptune.toml: regions.north.columns: unknown field 'usr' (did you mean 'user'?)"),
        ("[defaults]", "[default]",
         "hoptune.toml: unknown field 'default' (did you mean 'defaults'?)"),
    ],
    ids=["field", "family", "pruner-field", "column-field", "table"],
)
def test_an_unknown_name_gets_the_closest_known_one(project: Path, old: str, new: str,
                                                    message: str) -> None:
    (project / "hoptune.toml").write_text(CONFIG.replace(old, new))
    done = hoptune("ingest", cwd=project)
    assert (done.returncode, done.stderr) == (2, f"hoptune: error: {message}\n")
    assert files(project / "store") == set()


@pytest.mark.parametrize("command", [["tune", "nort"], ["plan", "nort", "--workers", "2"],
                                     ["report", "nort"], ["export", "nort", "--out", "x"],
                                     ["predict", "nort", "--input", "a.csv", "--out", "b.csv"]])
def test_an_unknown_region_lists_the_known_ones(project: Path, command: list[str]) -> None:
    done = hoptune(*command, cwd=project)
    assert done.returncode == 2
    assert done.stderr.endswith("no region 'nort' (did you mean 'north'?) (known: north)\n")
    assert not (project / "x").exists() and not (project / "b.csv").exists()


@pytest.mark.parametrize(("command", "message"), [
    (["report", "north"], "region 'north' has no study yet: run `hoptune tune north`"),
    (["export", "north", "--out", "x"],
     "region 'north' has no champion yet; run `hoptune nightly` or `hoptune tune north` first"),
])
def test_a_configured_region_without_a_study_says_what_to_run(project: Path, command,
                                                              message: str) -> None:
    done = hoptune(*command, cwd=project)
    assert (done.returncode, done.stderr) == (2, f"hoptune: error: {message}\n")
