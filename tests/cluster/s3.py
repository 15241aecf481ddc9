"""An S3 API for the tests: moto's server mode in a process of its own, on a free port.

Every process that uses it (this one, workers, commands) finds it through the
standard variables: ``AWS_ENDPOINT_URL`` and the credentials, which moto
accepts whatever they are. ``Outage`` sits between a store and the server and
refuses every connection while it is down: the network failing, for real.
"""

from __future__ import annotations

import os
import secrets
import select
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

__all__ = ["MotoServer", "Outage", "free_port"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class MotoServer:
    """``moto_server`` on 127.0.0.1 and a free port; ``env`` is what a client needs."""

    def __init__(self, log: Path) -> None:
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.log = log
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def env(self) -> dict[str, str]:
        return {"AWS_ACCESS_KEY_ID": "hoptune-test", "AWS_SECRET_ACCESS_KEY": "hoptune-test",
                "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": self.endpoint}

    def start(self) -> MotoServer:
        out = open(self.log, "ab")  # noqa: SIM115 - the child owns it
        self.process = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        out.close()
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(f"{self.endpoint}/moto-api/", timeout=1).close()
                return self
            except OSError:
                assert self.process.poll() is None, self.log.read_text(errors="replace")
                assert time.monotonic() < deadline, "moto_server did not answer in 30 s"
                time.sleep(0.1)

    def bucket(self) -> str:
        """A new, empty bucket of a unique name."""
        import boto3

        name = f"hoptune-{secrets.token_hex(6)}"
        boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1",
                     aws_access_key_id="hoptune-test",
                     aws_secret_access_key="hoptune-test").create_bucket(Bucket=name)
        return name

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()


class Outage:
    """A TCP relay to ``target_port`` that, while ``down``, closes every connection it gets."""

    def __init__(self, target_port: int) -> None:
        self.target = ("127.0.0.1", target_port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.down = False
        self.refused = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        self.listener.settimeout(0.1)
        while not self._stop.is_set():
            try:
                client, _ = self.listener.accept()
            except TimeoutError:
                continue
            if self.down:
                self.refused += 1
                client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                  b"\x01\x00\x00\x00\x00\x00\x00\x00")  # reset, not FIN
                client.close()
                continue
            threading.Thread(target=self._relay, args=(client,), daemon=True).start()

    def _relay(self, client: socket.socket) -> None:
        try:
            server = socket.create_connection(self.target)
        except OSError:
            client.close()
            return
        pair = {client: server, server: client}
        try:
            while not self._stop.is_set():
                ready, _, _ = select.select(list(pair), [], [], 0.1)
                for sock in ready:
                    data = sock.recv(65536)
                    if not data:
                        return
                    pair[sock].sendall(data)
        except OSError:
            return
        finally:
            client.close()
            server.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.listener.close()
