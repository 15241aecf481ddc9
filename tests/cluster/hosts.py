"""Hosts on one machine: each a ``hoptune worker`` process with a home, a working folder
and a temporary folder of its own, sharing only the URLs it is given (broker, study
database, store): what hosts that share nothing but the network have in common."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

__all__ = ["Host", "clean_env"]


def clean_env(shared: dict[str, str], home: Path, work: Path) -> dict[str, str]:
    """This machine's environment without any hoptune setting, plus ``shared``, with
    ``home``, ``work`` and a temporary folder of their own."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("HOPTUNE_") and not k.startswith("AWS_")}
    tmp = work.parent / "tmp"
    for folder in (home, work, tmp):
        folder.mkdir(parents=True, exist_ok=True)
    return {**env, **shared, "HOPTUNE_HOME": str(home), "TMPDIR": str(tmp),
            "HOPTUNE_TORCH_THREADS": "1", "PWD": str(work)}


class Host:
    """One host: its folders, and the worker process it runs."""

    def __init__(self, name: str, folder: Path, shared: dict[str, str]) -> None:
        self.name = name
        self.home, self.work = folder / "home", folder / "work"
        self.env = clean_env(shared, self.home, self.work)
        self.log = folder / "worker.log"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def worker(self) -> str:
        """The worker's name, as the study database records it."""
        return f"{self.name}@cluster"

    def hoptune(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """Run a hoptune command on this host, in its working folder."""
        return subprocess.run([sys.executable, "-P", "-m", "hoptune.tasks.cli", *args],
                              cwd=self.work, env=self.env, text=True, capture_output=True,
                              timeout=timeout)

    def start_worker(self, shards: str) -> None:
        out = open(self.log, "ab")  # noqa: SIM115 - the child owns it
        self.process = subprocess.Popen(
            [sys.executable, "-P", "-m", "hoptune.tasks.cli", "worker", "--shards", shards,
             "--name", self.worker, "--loglevel", "INFO"],
            cwd=self.work, env=self.env, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True)
        out.close()

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL the worker and every process it started, as a host that dies."""
        if self.alive():
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def stop(self) -> None:
        if not self.alive():
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(20)
        except subprocess.TimeoutExpired:
            self.kill()

    def read_log(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""
