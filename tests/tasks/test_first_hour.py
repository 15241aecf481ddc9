"""A new user's first hour, as README tells it, through the real command line.

In a fresh folder and a shell without any ``HOPTUNE_*`` variable: the demo (with
small flags, README's first command would take longer), then every command of
README's "After the demo" block and the run lines of ``examples/hoptune.toml``,
each exactly as written there, in sequence. Each must exit 0. The outputs they
leave are then held to what README promises: one number per trial in the demo's
table, ``hoptune status``, the report and ``card.json``; epochs numbered from 1;
what the demo says it left; each region its own seed; the card's settings those
the study ran with; the progress bar's total what ran; doctor's warning.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from hoptune.tuner import HopRecords, StudyDB

# one test process runs them all: the demo and README's commands, the module's fixture,
# then run once (--dist loadgroup), not once per test process
pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("first_hour")]

REPO = Path(__file__).resolve().parents[2]
REGIONS = ("north", "south", "east")
DEMO = "hoptune demo --trials 2 --epochs 1 --no-progress"


def readme_commands() -> list[str]:
    """The lines of README's "After the demo" shell block, as written."""
    section = (REPO / "README.md").read_text().split("### After the demo", 1)[1]
    block = section.split("```sh\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line.strip()]


def example_commands() -> list[str]:
    """The run lines of examples/hoptune.toml's header, as written (without the ``#``)."""
    lines = (REPO / "examples" / "hoptune.toml").read_text().splitlines()
    return [line.removeprefix("#").strip() for line in lines if line.startswith("#   ")]


def bare(command: str) -> str:
    """A shell line without its comment and spacing."""
    return " ".join(command.split("#", 1)[0].split())


def shell_env() -> dict[str, str]:
    """A fresh shell: no hoptune setting, this Python's ``hoptune`` and ``python`` first."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOPTUNE_")}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["HOPTUNE_TORCH_THREADS"] = "1"  # two cores, shared: one thread per worker
    return env


class FirstHour:
    """The folder and every command's result, in the order they ran."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.results: dict[str, subprocess.CompletedProcess[str]] = {}

    def run(self, command: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(["bash", "-c", command], cwd=self.folder, env=shell_env(),
                              text=True, capture_output=True, timeout=timeout)
        self.results[command] = done
        return done

    def output(self, command: str) -> str:
        (done,) = [r for c, r in self.results.items() if bare(c) == command]
        return done.stdout

    def db(self) -> StudyDB:
        return StudyDB(f"sqlite:///{self.folder / '.hoptune' / 'studies.db'}", create=False)

    def card(self, region: str, version: str | None = None) -> dict:
        models = self.folder / ".hoptune" / "store" / "models" / region
        version = version or json.loads((models / "champion.json").read_text())["version"]
        return json.loads((models / version / "card.json").read_text())


@pytest.fixture(scope="module")
def hour() -> Iterator[FirstHour]:
    """The demo, README's commands and the example's, in sequence, in a fresh folder."""
    folder = Path(tempfile.mkdtemp(prefix="hthour-"))  # short: the Redis socket lives in it
    shutil.copytree(REPO / "examples", folder / "examples",
                    ignore=shutil.ignore_patterns("*.csv", "__pycache__"))
    first = FirstHour(folder)
    if first.run(DEMO).returncode == 0:
        for command in [*readme_commands(), *example_commands()]:
            if first.run(command).returncode != 0:
                break
    yield first
    shutil.rmtree(folder, ignore_errors=True)


def test_readme_after_the_demo_and_the_examples_lines_exit_0_in_sequence(hour) -> None:
    assert hour.results[DEMO].returncode == 0, hour.results[DEMO].stderr
    expected = [DEMO, *readme_commands(), *example_commands()]
    for command, done in hour.results.items():
        assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"
    assert list(hour.results) == expected
    # the example's run line names --config after the command, where a user puts it
    assert any("tune ratings --config examples/hoptune.toml" in c for c in example_commands())


def _demo_rows(text: str) -> dict[tuple[str, int], list[str]]:
    lines = text.splitlines()
    header = lines[0].split()
    assert header == ["region", "trial", "state", "params", "metric", "epoch", "last",
                      "epochs", "hops", "seconds"]
    rows = [line.split() for line in lines[2:] if line.split()[:1] and line.split()[0]
            in REGIONS and len(line.split()) == len(header)]
    return {(r[0], int(r[1])): r for r in rows}


def _status_rows(text: str) -> dict[str, list[str]]:
    lines = text.splitlines()
    assert lines[0].split() == ["region", "study", "state", "pending", "running", "done",
                                "pruned", "failed", "best_trial", "metric", "epoch", "params"]
    return {r[0]: r for r in (line.split() for line in lines[2:]) if r and r[0] in REGIONS}


def _report_trials(page: str) -> dict[int, list[str]]:
    """The report's trials table: trial number -> its cells."""
    (table,) = [t for t in page.split("<table>") if "(selected epoch)</th>" in t]
    rows = re.findall(r"<tr>(.*?)</tr>", table.split("<tbody>", 1)[1])
    cells = [re.findall(r"<td[^>]*>(.*?)</td>", row) for row in rows]
    return {int(c[0]): c for c in cells}


def test_a_trial_has_one_number_in_the_demo_table_status_report_and_card(hour) -> None:
    demo = _demo_rows(hour.results[DEMO].stdout)
    status = _status_rows(hour.output("hoptune status"))
    report = _report_trials((hour.folder / ".hoptune" / "reports" / "north" / "index.html")
                            .read_text())
    exported = json.loads((hour.folder / "serve" / "card.json").read_text())
    for region in REGIONS:
        card = hour.card(region, "v0001")  # the demo's champion (a later tune may add one)
        number, metric = card["trial_number"], f"{card['metric']:.4g}"
        row = demo[(region, number)]
        assert (row[4], row[5]) == (metric, str(card["selected_epoch"])), (region, row, card)
        assert status[region][8:11] == [str(number), metric, str(card["selected_epoch"])]
        # epochs are numbered from 1: one epoch was trained, and it is epoch 1
        assert card["selected_epoch"] == 1
        if region == "north":
            assert (report[number][4], report[number][5]) == (metric, "1")
            assert exported["metric"] == card["metric"] and exported["trial_number"] == number
    # the demo's one-line summary of each champion says the same
    for region in REGIONS:
        card = hour.card(region, "v0001")
        assert (f"  {region}: champion v0001, validation {card['metric_name']} "
                f"{card['metric']:.4f} (trial {card['trial_number']}, epoch 1)"
                ) in hour.results[DEMO].stdout.splitlines()


def test_the_demo_says_what_it_left_and_its_next_commands_are_readmes(hour) -> None:
    out = hour.results[DEMO].stdout.splitlines()
    left = out[out.index("what the demo left:"):]
    assert "  configuration: .hoptune/demo/hoptune.toml (the commands below, run in this " \
           "folder, find it)" in left
    assert "  home: .hoptune (study database, store, registry, reports)" in left
    suggested = left[left.index("try next:") + 1:]
    assert len(suggested) == 3
    readme = [bare(c) for c in readme_commands()]
    for command in suggested:
        assert command.startswith("  ") and bare(command) in readme, command
    # the commands after the demo found its configuration, and said which one they used
    tune = hour.results[next(c for c in hour.results if bare(c).startswith("hoptune tune north"))]
    assert "using the demo's configuration .hoptune/demo/hoptune.toml" in tune.stderr


def test_each_demo_region_draws_its_own_proposals(hour) -> None:
    db = hour.db()
    try:
        first = {region: db.studies(region)[0] for region in REGIONS}
        assert len({s.seed for s in first.values()}) == len(REGIONS)
        params = [json.dumps(db.trials(s.id)[0].params, sort_keys=True) for s in first.values()]
        assert len(set(params)) == len(REGIONS)
    finally:
        db.dispose()


def test_the_card_records_the_settings_the_study_ran_with(hour) -> None:
    # the demo's file says 8 trials and 3 epochs; the demo ran 2 trials of 1 epoch
    config = (hour.folder / ".hoptune" / "demo" / "hoptune.toml").read_text()
    assert "trials = 8" in config and "epochs = 3" in config
    for region in REGIONS:
        ran = hour.card(region, "v0001")["region_config"]
        assert (ran["trials"], ran["epochs"], ran["parallel"]) == (2, 1, 2)


def test_the_progress_bar_ends_at_the_hops_that_ran(hour) -> None:
    tune = hour.results[next(c for c in hour.results if bare(c).startswith("hoptune tune north"))]
    bars = re.findall(r"(\d+)/(\d+) \[", tune.stderr)
    assert bars, tune.stderr
    done, total = map(int, bars[-1])
    db = hour.db()
    try:
        study = db.studies("north")[-1]
        assert len(db.studies("north")) == 2 and study.parent_id is not None
        assert done == total == HopRecords(db).done_count(study.id)
        # the bar's total never counted more than the study's whole budget
        assert all(int(t) <= study.budget * study.epochs * 2 for _, t in bars)
    finally:
        db.dispose()


def test_doctor_and_plan_say_what_each_figure_is(hour) -> None:
    doctor = hour.output("hoptune doctor").splitlines()
    # the embedded broker is not running after the demo: usable, but it does not answer
    (broker,) = [line for line in doctor if " broker: " in line]
    assert broker.startswith("warn broker: ") and "does not answer" in broker
    assert doctor[-1].startswith("everything checked is usable; see the warning above")
    plan = hour.output("hoptune plan north --workers 2")
    assert "the cost model's spread" in plan and "of its fitted cost" in plan
    assert "busy share per worker (its time training hops and validating, of the wall time)" \
        in plan
    assert "where the workers' busy time goes: training " in plan


def test_predict_counts_the_rows_the_fallback_predicted(hour) -> None:
    out = hour.output("hoptune predict north --input .hoptune/demo/data/north.csv "
                      "--out predictions.csv")
    # every id of the demo's data was seen by the champion's ingest
    assert re.search(r"written to predictions.csv; 0 of them by the fallback", out), out
