"""The suite runs on servers of its own: a private Redis, its own PostgreSQL databases.

Two test runs on one host (two engineers, CI beside a developer) must neither
flush nor consume each other's queues, and a machine's own Redis on port 6379
is never touched unless ``HOPTUNE_TEST_REDIS_URL`` names it.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

import pytest

psutil = pytest.importorskip("psutil")

TESTS = Path(__file__).resolve().parent


def _explicit_server() -> bool:
    from hoptune.tasks.worker._broker import ping

    url = os.environ.get("HOPTUNE_TEST_REDIS_URL")
    return bool(url) and ping(url)


def test_the_session_redis_is_a_server_this_run_started() -> None:
    if _explicit_server():
        pytest.skip("HOPTUNE_TEST_REDIS_URL names the server to use")
    from hoptune.tasks.worker._broker import redis_client

    url = os.environ["HOPTUNE_BROKER_URL"]
    assert url.startswith("redis+socket://"), url
    socket = Path(url.removeprefix("redis+socket://").partition("?")[0])
    # in a folder of its own under the temporary directory, not a shared path
    assert socket.parent.parent == Path(tempfile.gettempdir())
    assert socket.parent.name.startswith("htredis-")
    # and served by a redis-server process that this test process started
    pid = int(redis_client(url, 5.0).info("server")["process_id"])
    assert psutil.Process(pid).ppid() == os.getpid()


def test_postgres_databases_are_named_by_process_and_a_random_token(postgres_url: str) -> None:
    name = postgres_url.rsplit("/", 1)[1]
    assert re.fullmatch(rf"hoptune_test_{os.getpid()}_[0-9a-f]{{8}}", name), name


def test_no_test_names_the_machines_redis() -> None:
    """A test that hard-codes the default Redis port on this host would reach a foreign server."""
    offenders = [
        f"{path.relative_to(TESTS)}:{number}"
        for path in TESTS.rglob("*.py")
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"(127\.0\.0\.1|localhost):6379", line)
    ]
    assert offenders == []
