"""The dashboard in a real browser, over a study that real workers are running.

Headless Debian ``chromium`` driven by Playwright (never a browser Playwright
downloads: ``.ci/run`` installs the distribution's package where it is
missing), two real ``hoptune worker`` processes on the test Redis, and the
real ``hoptune dashboard`` command with HTTP basic auth set. One study of a
tiny model runs through the module; the pages are opened before it starts,
and what they show changes without a reload. A screenshot of each page is
written under the test's temporary folder and copied to ``SHOTS``.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.tasks.configs import CONFIG, FAST_LIVENESS, REGION

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
if not Path(CHROMIUM).exists():
    pytest.skip(f"no chromium at {CHROMIUM} (Debian's package `chromium`; .ci/run installs it)",
                allow_module_level=True)

# one test process runs them all: the module's cluster, study and browser start once
pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("dashboard")]

SHOTS = Path("/tmp/dashboard-shots")
USER, PASSWORD = "night", "owl-1234"
WAIT = 180.0  # seconds a study of this module may take on a loaded 2-core host


class Night:
    """The module's home, its cluster, its study, the dashboard and the browser."""

    def __init__(self, home: Path, rt: Any, study: int, url: str, page: Any) -> None:
        self.home, self.rt, self.study, self.url, self.page = home, rt, study, url, page
        self.started = False

    def start(self) -> None:
        """Send the study's first ``tune_step`` (once)."""
        if not self.started:
            from hoptune.tasks import app
            from hoptune.tasks.cli import start_studies

            start_studies(app, [self.study])
            self.started = True

    def api(self, path: str) -> dict[str, Any]:
        return json.loads(get(self.url + path, auth=True)[1])

    def wait(self, what: str, check: Any, timeout: float = WAIT) -> Any:
        """Poll the dashboard's own JSON until ``check(data)`` holds; returns the data."""
        deadline = time.monotonic() + timeout
        while True:
            data = self.api(f"/api/study/{self.study}")
            if check(data):
                return data
            if time.monotonic() > deadline:
                raise AssertionError(f"{what}: not within {timeout:.0f} s; the study shows "
                                     f"{[(t['number'], t['state']) for t in data['trials']]}")
            time.sleep(0.5)


def get(url: str, *, auth: bool) -> tuple[int, bytes]:
    request = urllib.request.Request(url)
    if auth:
        token = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


@pytest.fixture(scope="module")
def night() -> Iterator[Night]:
    from playwright.sync_api import sync_playwright

    from hoptune.core import Settings
    from hoptune.regions import ingest, load_config, write_ratings
    from hoptune.tasks import app, create_study
    from hoptune.tasks.cli import LocalCluster
    from hoptune.tasks.worker import Runtime, redis_client

    folder = Path(tempfile.mkdtemp(prefix="htdash-"))
    # 6 trials of 3 epochs, 2 at a time: rungs at epochs 1 and 2, where ASHA prunes
    text = CONFIG.format(shards=2, epochs=3, trials=6, parallel=2, batch_size=256)
    write_ratings(folder / "data" / "north.csv", n_users=60, n_items=50, n_rows=1500, rank=3,
                  noise=0.3, seed=10)
    (folder / "hoptune.toml").write_text(text + REGION.format(name="north"))
    dashboard = browser = cluster = None
    with pytest.MonkeyPatch.context() as mp, sync_playwright() as playwright:
        mp.setenv("HOPTUNE_HOME", str(folder))
        mp.chdir(folder)
        broker = os.environ["HOPTUNE_BROKER_URL"]
        redis_client(broker, 5.0).flushdb()
        rt = Runtime(Settings.from_env(), worker="test")
        try:
            region = load_config(folder / "hoptune.toml").region("north")
            manifest = ingest(region, rt.store).manifest
            cluster = LocalCluster({"north": 2}, 2, log_dir=folder / "logs", loglevel="INFO",
                                   env={"HOPTUNE_BROKER_URL": broker, **FAST_LIVENESS})
            cluster.start()
            study = create_study(rt, region, manifest=manifest)  # running, no trial yet
            env = {**os.environ, "HOPTUNE_DASHBOARD_USER": USER,
                   "HOPTUNE_DASHBOARD_PASSWORD": PASSWORD, **FAST_LIVENESS}
            dashboard = subprocess.Popen(
                [sys.executable, "-m", "hoptune.tasks.cli", "dashboard", "--port", "0"],
                env=env, cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                text=True)
            line = dashboard.stdout.readline()
            assert "http://" in line, line + dashboard.stdout.read()
            url = "http://" + line.split("http://", 1)[1].split("/", 1)[0]
            browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
            context = browser.new_context(http_credentials={"username": USER,
                                                            "password": PASSWORD},
                                          viewport={"width": 1400, "height": 900})
            cluster.wait_ready(app)
            yield Night(folder, rt, study, url, context.new_page())
        finally:
            if browser is not None:
                browser.close()
            if dashboard is not None:
                dashboard.terminate()
                dashboard.wait(timeout=30)
            if cluster is not None:
                cluster.stop()
            rt.db.dispose()
            shutil.rmtree(folder, ignore_errors=True)


def shoot(night: Night, name: str, tmp_path: Path) -> Path:
    """A full-page screenshot under the test's folder, copied to ``SHOTS`` for a person."""
    path = tmp_path / f"{name}.png"
    night.page.screenshot(path=str(path), full_page=True)
    SHOTS.mkdir(parents=True, exist_ok=True)
    shutil.copy(path, SHOTS / path.name)
    return path


def test_trials_appear_and_hops_advance_without_a_reload(night: Night, tmp_path: Path) -> None:
    page = night.page
    page.goto(f"{night.url}/region/north")
    page.wait_for_selector("#hops-done")
    assert page.inner_text("#hops-done") == "0"
    page.evaluate("window.loadedOnce = true")  # gone if the page were loaded again
    night.start()
    page.wait_for_selector("#trials tr[data-trial]", timeout=WAIT * 1000)
    # from 0 before the study started to the hops its workers have done since, in place
    page.wait_for_function("Number(document.getElementById('hops-done').textContent) >= 2",
                           timeout=WAIT * 1000)
    assert page.evaluate("window.loadedOnce") is True
    assert page.locator("#trials tr[data-trial]").count() >= 1
    shoot(night, "study-running", tmp_path)


def test_the_cluster_page_shows_the_hops_of_each_worker(night: Night, tmp_path: Path) -> None:
    night.start()
    night.wait("a hop done", lambda d: d["hops"]["done"] >= 2)
    page = night.page
    page.goto(f"{night.url}/cluster")
    page.wait_for_selector("#gantt rect.hop", timeout=WAIT * 1000)
    lanes = page.locator("#gantt g.lane").count()
    assert lanes >= 1
    rows = page.locator("#workers tr[data-worker]")
    assert rows.count() == 2
    assert set(page.locator("#workers tr[data-worker] .badge").all_inner_texts()) <= {
        "live", "warming up"}
    shoot(night, "cluster", tmp_path)


def test_a_click_on_a_trial_shows_its_curve(night: Night, tmp_path: Path) -> None:
    night.start()
    data = night.wait("a trial with two epochs", lambda d: any(
        sum(m is not None for m in t["curve"]) >= 2 for t in d["trials"]))
    trial = next(t for t in data["trials"] if sum(m is not None for m in t["curve"]) >= 2)
    page = night.page
    page.goto(f"{night.url}/study/{night.study}")
    page.click(f"#trials tr[data-trial='{trial['number']}']")
    page.wait_for_selector(f"#trial-curve[data-trial='{trial['number']}'] circle.point")
    points = page.locator("#trial-curve circle.point").count()
    assert points >= 2  # one per ended epoch (more may have ended since)
    assert page.inner_text("#trial-title").startswith(f"Trial {trial['number']}")
    assert page.locator("#trial-hops tbody tr").count() >= 2 * 2  # its hops, two shards
    assert page.locator(f"#curves g.curve.selected[data-trial='{trial['number']}']").count() == 1


def test_a_pruned_trial_is_marked_at_its_rung(night: Night, tmp_path: Path) -> None:
    night.start()
    data = night.wait("the study's end", lambda d: d["study"]["state"] != "running")
    assert data["study"]["state"] == "done"
    pruned = [t for t in data["trials"] if t["state"] == "pruned"]
    assert pruned, "ASHA pruned no trial of this study"
    page = night.page
    page.goto(f"{night.url}/study/{night.study}")
    page.wait_for_selector("#curves .pruned-mark")
    for trial in pruned:
        rung = trial["epochs_done"]
        assert rung in data["rungs"]
        mark = page.locator(f"#curves .pruned-mark[data-trial='{trial['number']}']")
        assert mark.get_attribute("data-epoch") == str(rung)
        decided = page.locator(f"#rungs [data-rung='{rung}'] tr[data-trial='{trial['number']}']")
        assert decided.get_attribute("data-decision") == "pruned"
    assert page.locator("#curves .pruned-mark").count() == len(pruned)
    # trial 2 is in the third bracket, first judged after epoch 4, past the study's 3: it
    # trains every epoch, and no rung judged it
    assert next(t for t in data["trials"] if t["number"] == 2)["epochs_done"] == 3
    for rung in data["rungs"]:
        decided = page.locator(f"#rungs [data-rung='{rung}'] tr[data-trial='2']")
        assert decided.get_attribute("data-decision") == "not judged"
    page.click(f"#trials tr[data-trial='{pruned[0]['number']}']")
    page.wait_for_selector(f"#trial-curve[data-trial='{pruned[0]['number']}'] .pruned-mark")
    shoot(night, "study-done", tmp_path)


def test_the_night_and_the_registry(night: Night, tmp_path: Path) -> None:
    night.start()
    night.wait("the study's end", lambda d: d["study"]["state"] != "running")
    page = night.page
    page.goto(night.url + "/")
    page.wait_for_selector("#regions tr[data-region='north']")
    assert page.get_attribute("#regions tr[data-region='north']", "data-state") == "done"
    shoot(night, "night", tmp_path)
    deadline = time.monotonic() + WAIT
    while not night.api("/api/registry")["regions"] and time.monotonic() < deadline:
        time.sleep(0.5)  # promotion follows the study's end; the sampler reads it every 3 s
    page.goto(night.url + "/registry")
    page.wait_for_selector("[data-region='north'] circle.champion")
    assert "v0001" in page.inner_text("[data-region='north']")
    shoot(night, "registry", tmp_path)


def test_an_unknown_region_or_study_answers_404(night: Night, tmp_path: Path) -> None:
    page = night.page
    response = page.goto(f"{night.url}/region/atlantis")
    assert response is not None and response.status == 404
    assert "no region 'atlantis'" in page.inner_text("#error")
    shoot(night, "not-found", tmp_path)
    assert page.goto(f"{night.url}/study/999999").status == 404
    assert get(f"{night.url}/api/region/atlantis", auth=True)[0] == 404
    assert get(f"{night.url}/api/study/{night.study}/trial/999", auth=True)[0] == 404


def test_a_request_without_credentials_answers_401(night: Night) -> None:
    for path in ("/", "/api/night", "/region/north", "/static/dashboard.js", "/nowhere"):
        status, _ = get(night.url + path, auth=False)
        assert status == 401, path
    assert get(night.url + "/api/night", auth=True)[0] == 200


def test_it_refuses_to_listen_beyond_loopback_without_credentials(night: Night) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOPTUNE_DASHBOARD_")}
    done = subprocess.run([sys.executable, "-m", "hoptune.tasks.cli", "dashboard", "--host",
                           "0.0.0.0", "--port", "0"], env={**env, "HOPTUNE_HOME": str(night.home)},
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "hoptune: error: dashboard --host 0.0.0.0 without HTTP basic auth: set "
        "HOPTUNE_DASHBOARD_USER and HOPTUNE_DASHBOARD_PASSWORD, or listen on 127.0.0.1"]
