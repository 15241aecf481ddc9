"""What a command prints and where it writes: no password on the screen, no path escape."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest


def test_hoptune_up_never_prints_the_broker_password(home: Path, start_redis) -> None:
    from hoptune.regions import write_demo

    config = write_demo(home / "demo")
    server = start_redis(password="s3cret-word")
    try:
        env = {**os.environ, "HOPTUNE_BROKER_URL": server.url, "HOPTUNE_HOME": str(home),
               "HOPTUNE_CONFIG": str(config)}
        up = subprocess.Popen(["hoptune", "up", "--workers", "1"], env=env, cwd=home,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              start_new_session=True)
        lines = []
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            line = up.stdout.readline()
            lines.append(line)
            if line.startswith("broker ") or not line:
                break
        os.killpg(up.pid, signal.SIGINT)
        rest, _ = up.communicate(timeout=60)
    finally:
        server.kill()
    printed = "".join(lines) + rest
    assert f"broker redis://:**@127.0.0.1:{server.port}/0;" in printed
    assert "s3cret-word" not in printed


@pytest.mark.parametrize("args", [["export", "../../etc", "--out", "x"], ["models", "a/b"],
                                  ["report", ".."], ["status", "North"], ["ingest", "x y"]])
def test_a_region_argument_that_is_not_a_name_is_refused(home: Path, args: list[str]) -> None:
    done = subprocess.run(["hoptune", *args], cwd=home, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1] == (
        f"hoptune {args[0]}: error: argument REGION: bad region name {args[1]!r} "
        f"(expected [a-z0-9_-]+)")
    assert not (home / "x").exists() and list(home.iterdir()) == []
