"""The local cluster: N worker processes on this machine splitting the shards among them.

``hoptune up`` and ``hoptune demo`` use it. Each worker is a real
``hoptune worker`` process (a Celery worker) that owns some shards and
consumes exactly their queues plus the control queue. By default there is one
worker per visible GPU, each training on its own GPU; on a host without GPUs,
two workers on the CPU.
"""

from __future__ import annotations

import itertools
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from hoptune.core import Settings, StoreError, parse_duration
from hoptune.tasks.hop import graphs_mode
from hoptune.tasks.worker import chain_seconds, local_devices, take_lease, visible_gpus

__all__ = ["AUTO_WORKERS", "assign_shards", "default_workers", "LocalCluster", "local_cluster",
           "stop_seconds", "worker_command"]

#: ``workers`` meaning "the default": one per visible GPU, or 2 without GPUs.
AUTO_WORKERS = 0


def stop_seconds() -> float:
    """How long local workers told to stop may finish the hop they run before they are killed
    (``HOPTUNE_STOP_SECONDS``: seconds, or a duration such as ``2m``; default 20): a hop cut
    off is trained again elsewhere."""
    return parse_duration(os.environ.get("HOPTUNE_STOP_SECONDS", "20"), "HOPTUNE_STOP_SECONDS")


def default_workers(gpus: int | None = None) -> int:
    """How many local workers to start by default: one per visible GPU, else 2."""
    gpus = visible_gpus() if gpus is None else gpus
    return gpus or 2


def assign_shards(shards: dict[str, int], workers: int) -> list[list[tuple[str, int]]]:
    """The (region, shard) pairs each local worker owns: the planner's placement rule
    (``hoptune.tasks.plan.worker_shards``), so a plan simulates the cluster it starts."""
    from hoptune.tasks.plan import worker_shards

    return worker_shards(shards, workers)


def worker_command(owned: list[tuple[str, int]], name: str, loglevel: str = "WARNING",
                   device: str | None = None) -> list[str]:
    """The command of one local worker process (on ``device``, or the worker's default).

    ``-P`` keeps the current folder off ``sys.path``, so a user's own module
    named like one of hoptune's (a Celery project's ``tasks.py``) is never imported.
    """
    spec = ",".join(f"{r}:{k}" for r, k in owned)
    command = [sys.executable, "-P", "-m", "hoptune.tasks.cli", "worker", "--shards", spec,
               "--name", name, "--loglevel", loglevel]
    return command + (["--device", device] if device else [])


class LocalCluster:
    """N local worker processes; a context manager that stops them on exit.

    Worker i trains on ``devices[i]``; by default the visible GPUs in turn, or the CPU.
    With ``home``, the workers' names are leased there for the cluster's life: another
    command's local workers on the same home (and broker) take the next free names, as
    Celery's replies, the shard takeovers and the workers' info files tell workers apart
    by name.
    """

    def __init__(self, shards: dict[str, int], workers: int, *, env: dict[str, str] | None = None,
                 log_dir: Path | None = None, loglevel: str = "WARNING",
                 devices: list[str] | None = None, home: Path | None = None) -> None:
        self.assignment = assign_shards(shards, workers)
        self.devices = devices or local_devices(workers, visible_gpus())
        self.env = {**os.environ, **(env or {})}
        self.log_dir = log_dir
        self.loglevel = loglevel
        self.stop_timeout = stop_seconds()  # read before anything starts: a bad one stops here
        chain_seconds()  # the workers' (they inherit the environment): likewise
        graphs_mode(self.env)  # likewise
        self.processes: list[subprocess.Popen[bytes]] = []
        host = socket.gethostname()
        self._leases: list[IO[bytes]] = []
        if home is None:
            self.names = [f"w{i}@{host}" for i in range(workers)]
        else:
            self.names = []
            for i in itertools.count():
                if len(self.names) == workers:
                    break
                lease = take_lease(home / "local-workers" / f"w{i}@{host}")
                if lease is not None:
                    self._leases.append(lease)
                    self.names.append(f"w{i}@{host}")

    def start(self) -> LocalCluster:
        from hoptune.tuner import utcnow

        self.started = utcnow()
        for name, owned, device in zip(self.names, self.assignment, self.devices, strict=True):
            if not owned:
                continue
            out = subprocess.DEVNULL
            if self.log_dir is not None:
                self.log_dir.mkdir(parents=True, exist_ok=True)
                out = open(self.log_dir / f"{name.split('@')[0]}.log", "ab")  # noqa: SIM115
            self.processes.append(subprocess.Popen(
                worker_command(owned, name, self.loglevel, device), env=self.env, stdout=out,
                stderr=subprocess.STDOUT, start_new_session=True))
        return self

    def wait_ready(self, app: object, timeout: float = 120.0) -> None:
        """Block until every worker answers a ping."""
        def answering() -> set[str]:
            replies = app.control.ping(timeout=0.1)  # type: ignore[attr-defined]
            return {name for reply in replies for name in reply}

        self._wait_for(answering, "start", timeout, pause=0.0)  # the ping waits 0.1 s

    def wait_warm(self, db: Any, timeout: float = 120.0) -> None:
        """Block until every worker's training process has warmed up (its heartbeat row says
        ``warm``): what it loads in the background (torch's compiler stack, its shards,
        scikit-optimize) is loaded, so its tasks take their steady-state time."""
        from hoptune.tuner import WorkerRecords

        def warm() -> set[str]:
            # this cluster's processes' rows: an earlier process of the same name started before
            return {r["name"] for r in WorkerRecords(db).all()
                    if (r["info"] or {}).get("warm") and r["started_at"] >= self.started}

        self._wait_for(warm, "warm up", timeout, pause=0.1)

    def _wait_for(self, names: Callable[[], set[str]], what: str, timeout: float,
                  pause: float) -> None:
        """Poll ``names`` (the workers done so far) until it holds every worker of this cluster;
        a worker that exits meanwhile, or the timeout, is a StoreError."""
        expected = {n for n, owned in zip(self.names, self.assignment, strict=True) if owned}
        deadline = time.monotonic() + timeout
        done: set[str] = set()
        while time.monotonic() < deadline:
            for p in self.processes:
                if p.poll() is not None:
                    raise StoreError(f"a worker exited with status {p.returncode} at start")
            done = names()
            if expected <= done:
                return
            time.sleep(pause)
        raise StoreError(f"workers {sorted(expected - done)} did not {what} within "
                         f"{timeout:.0f} s")

    def alive(self) -> bool:
        return all(p.poll() is None for p in self.processes)

    def stop(self, timeout: float | None = None) -> None:
        """SIGTERM each worker (Celery's warm shutdown: it finishes its hop), and SIGKILL one
        still running after ``timeout`` seconds (default: ``HOPTUNE_STOP_SECONDS``)."""
        timeout = self.stop_timeout if timeout is None else timeout
        for p in self.processes:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for p in self.processes:
            try:
                p.wait(max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        self.processes = []
        for lease in self._leases:  # the names are free once their workers are gone
            lease.close()
        self._leases = []


@contextmanager
def local_cluster(settings: Settings, shards: dict[str, int], workers: int | None,
                  loglevel: str = "WARNING", devices: list[str] | None = None,
                  wait: bool = True) -> Iterator[LocalCluster | None]:
    """The embedded Redis (unless ``HOPTUNE_BROKER_URL`` is set) and ``workers`` local workers.

    With ``workers`` None nothing is started: the workers are elsewhere.
    ``AUTO_WORKERS`` starts ``default_workers()``. ``devices``: one per worker
    (default: the visible GPUs in turn, or the CPU). With ``wait=False`` it
    returns once Redis is up and the workers are spawned: the caller works
    while they import, and calls ``wait_ready`` when it needs them.
    """
    if workers is None:
        yield None
        return
    workers = workers or default_workers()
    from hoptune.tasks import app
    from hoptune.tasks.worker import EmbeddedRedis

    cluster = LocalCluster(shards, workers, log_dir=settings.home / "logs", loglevel=loglevel,
                           devices=devices, home=settings.home)
    broker = None if settings.broker_url else EmbeddedRedis(settings.home).start()
    try:
        cluster.start()
        if wait:
            cluster.wait_ready(app)
        yield cluster
    finally:
        cluster.stop()
        if broker is not None:
            broker.stop()
