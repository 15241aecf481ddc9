"""`hoptune flower`: a real Flower process, behind basic auth, watching real workers hop."""

from __future__ import annotations

import ast
import base64
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hoptune.tuner import HopRecords

USER, PASSWORD = "ops", "hop-secret-1"
CREDENTIAL_VARIABLES = ("HOPTUNE_FLOWER_USER", "HOPTUNE_FLOWER_PASSWORD", "FLOWER_BASIC_AUTH")

# No proxy: Flower listens on this machine.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without any Flower credentials, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k not in CREDENTIAL_VARIABLES}
    return {**env, **extra}


def get(url: str, auth: tuple[str, str] | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(url)
    if auth is not None:
        token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with _OPENER.open(request, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


class Flower:
    """A `hoptune flower` process in its own process group, with its log."""

    def __init__(self, home: Path, redis_url: str) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log = home / "flower.log"
        env = clean_env(HOPTUNE_BROKER_URL=redis_url, HOPTUNE_FLOWER_USER=USER,
                        HOPTUNE_FLOWER_PASSWORD=PASSWORD)
        with open(self.log, "wb") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "hoptune.tasks.cli", "flower", "--port", str(self.port)],
                cwd=home, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    def api(self, path: str) -> Any:
        status, body = get(self.base + path, (USER, PASSWORD))
        assert status == 200, (path, status, body[:200], self.tail())
        return json.loads(body)

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]

    def wait_for_workers(self, names: list[str], timeout: float = 60.0) -> None:
        """Until Flower's event receiver has seen every worker alive (its heartbeats)."""
        deadline = time.monotonic() + timeout
        alive: dict[str, bool] = {}
        while time.monotonic() < deadline:
            assert self.process.poll() is None, f"flower exited: {self.tail()}"
            try:
                status, body = get(f"{self.base}/api/workers?status=1", (USER, PASSWORD))
            except OSError:  # not listening yet
                status = 0
            if status == 200:
                alive = json.loads(body)
                if all(alive.get(n) for n in names):
                    return
            time.sleep(0.5)
        raise AssertionError(f"flower saw {alive}, not all of {names}: {self.tail()}")

    def stop(self) -> int:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        return self.process.returncode


@pytest.fixture
def flower(redis_url: str, home: Path) -> Iterator[Flower]:
    process = Flower(home, redis_url)
    yield process
    process.stop()


def hop_tasks(tasks: dict[str, dict[str, Any]], study: int) -> dict[tuple, tuple[str, str]]:
    """Flower's hop tasks of one study: (region, study, trial, epoch, position, shard) ->
    (state, worker)."""
    out = {}
    for task in tasks.values():
        assert task["name"] == "hoptune.hop", task
        if not task.get("kwargs"):
            continue  # only its task-sent event so far: kwargs come with task-received
        kwargs = ast.literal_eval(task["kwargs"])
        if kwargs["study"] != study:
            continue
        key = tuple(kwargs[k] for k in ("region", "study", "trial", "epoch", "position", "shard"))
        # a task Flower knows from its sent event only has no worker yet: the wait goes on
        out[key] = (task["state"], task.get("worker"))
    return out


@pytest.mark.integration
def test_flower_shows_the_hops_of_a_study_behind_basic_auth(make_config, rt, cluster,
                                                             flower: Flower) -> None:
    from hoptune.core import Store
    from hoptune.regions import ingest, load_config
    from hoptune.tasks import app, create_study
    from hoptune.tasks.cli._follow import follow, start_studies

    region = load_config(make_config(shards=2, epochs=1, rows=1500)).region("north")
    manifest = ingest(region, Store(rt.settings.store_url)).manifest
    workers = cluster({"north": 2}, workers=2)
    flower.wait_for_workers(workers.names)

    study = create_study(rt, region, manifest=manifest,
                         configs=[{"lr": 0.02}, {"lr": 0.05, "embedding_dim": 4}])
    start_studies(app, [study])
    follow(rt, app, [study], progress=False, timeout=120)
    expected = {("north", study, h.trial_id, h.epoch, h.position, h.shard):
                ("SUCCESS", h.worker) for h in HopRecords(rt.db).all(study_id=study)}
    assert len(expected) == 2 * 2

    deadline = time.monotonic() + 20  # the last events may reach Flower after the study ends
    while True:
        seen = hop_tasks(flower.api("/api/tasks?taskname=hoptune.hop"), study)
        if seen == expected or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert seen == expected  # every hop, with its region and trial, on the worker that ran it
    # each worker's page shows the device it trains on and its kernels (stats, "Other" tab)
    shown = flower.api("/api/workers?refresh=1")
    for name in workers.names:
        info = shown[name]["stats"]["hoptune"]
        assert info["device"] == "cpu" and info["kernels"] == "auto", info

    assert get(f"{flower.base}/api/tasks")[0] == 401
    assert get(f"{flower.base}/api/tasks", (USER, "wrong"))[0] == 401
    assert get(f"{flower.base}/api/tasks", ("someone", PASSWORD))[0] == 401
    assert get(f"{flower.base}/")[0] == 401
    assert flower.stop() == 0, flower.tail()  # SIGTERM stops it cleanly


def refused(home: Path, args: tuple[str, ...], env: dict[str, str]
            ) -> subprocess.CompletedProcess[str]:
    """`hoptune flower` expected to refuse at once: a Flower that started would time out."""
    result = subprocess.run([sys.executable, "-m", "hoptune.tasks.cli", "flower", *args], cwd=home,
                            env=env, text=True, capture_output=True, timeout=60)
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    return result


def test_flower_on_a_cluster_refuses_to_start_without_credentials(home: Path) -> None:
    result = refused(home, ("--port", str(free_port())),
                     clean_env(HOPTUNE_BROKER_URL="redis://127.0.0.1:1/0"))
    assert result.stderr == (
        "hoptune: error: flower on a cluster (HOPTUNE_BROKER_URL is set) needs HTTP basic "
        "auth: set HOPTUNE_FLOWER_USER and HOPTUNE_FLOWER_PASSWORD\n")


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (("--address", "0.0.0.0"), {},
         "flower --address 0.0.0.0 without HTTP basic auth: set HOPTUNE_FLOWER_USER and "
         "HOPTUNE_FLOWER_PASSWORD, or listen on 127.0.0.1"),
        ((), {"HOPTUNE_FLOWER_PASSWORD": PASSWORD},
         "HOPTUNE_FLOWER_USER is empty or unset: set both HOPTUNE_FLOWER_USER and "
         "HOPTUNE_FLOWER_PASSWORD, or neither"),
        ((), {"HOPTUNE_FLOWER_USER": USER, "HOPTUNE_FLOWER_PASSWORD": "a,b"},
         "HOPTUNE_FLOWER_USER and HOPTUNE_FLOWER_PASSWORD must not contain ','"),
        ((), {"HOPTUNE_FLOWER_USER": USER, "HOPTUNE_FLOWER_PASSWORD": PASSWORD},
         "no embedded Redis answers on {home}/redis.sock: start `hoptune up` first, or set "
         "HOPTUNE_BROKER_URL"),
    ],
    ids=["public-address-without-auth", "half-credentials", "comma", "no-embedded-redis"],
)
def test_flower_on_the_embedded_default_refuses_bad_settings(
        home: Path, args: tuple[str, ...], env: dict[str, str], message: str) -> None:
    embedded = clean_env(**env)
    embedded.pop("HOPTUNE_BROKER_URL", None)
    result = refused(home, args, embedded)
    assert result.stderr == f"hoptune: error: {message.format(home=home)}\n"
