"""The nightly schedule celery beat runs, and `hoptune beat --dry-run`."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

from hoptune.regions import load_config
from hoptune.tasks.study._schedule import beat_schedule, next_nightly

CONFIG = """[schedule]
cron = "{cron}"
timezone = "{tz}"
[regions.north]
data = "data/north.csv"
family = "rating_mf"
rating_range = [1.0, 5.0]
"""


def _config(folder: Path, cron: str = "0 2 * * *", tz: str = "UTC") -> Path:
    path = folder / "hoptune.toml"
    path.write_text(CONFIG.format(cron=cron, tz=tz))
    return path


def test_the_schedule_sends_the_nightly_run_and_the_sweeper_to_the_control_queue(
        tmp_path: Path) -> None:
    schedule = beat_schedule(load_config(_config(tmp_path, "30 1 * * 1-5", "Europe/Paris")))
    nightly, sweeper = schedule["hoptune-nightly"], schedule["hoptune-sweep"]
    assert nightly["task"] == "hoptune.nightly" and sweeper["task"] == "hoptune.sweep"
    assert nightly["options"] == sweeper["options"] == {"queue": "hoptune.control"}
    assert nightly["schedule"].minute == {30} and nightly["schedule"].hour == {1}
    assert nightly["schedule"].day_of_week == {1, 2, 3, 4, 5}
    assert str(nightly["schedule"].tz) == "Europe/Paris"


def test_next_nightly_run_follows_cron_and_time_zone(tmp_path: Path) -> None:
    config = load_config(_config(tmp_path, "30 1 * * 1-5", "Europe/Paris"))
    # Sunday 2026-11-22 04:00 UTC: the next weekday 01:30 in Paris is Monday 00:30 UTC
    due = next_nightly(config, datetime(2026, 11, 22, 4, 0, tzinfo=UTC))
    assert due.astimezone(UTC) == datetime(2026, 11, 23, 0, 30, tzinfo=UTC)
    assert next_nightly(load_config(_config(tmp_path)), datetime(2026, 11, 22, 1, 59,
                                                                 tzinfo=UTC)).hour == 2


def test_beat_dry_run_prints_the_schedule(tmp_path: Path) -> None:
    _config(tmp_path, "15 3 * * *")
    result = subprocess.run([sys.executable, "-m", "hoptune.tasks.cli", "beat", "--dry-run"],
                            cwd=tmp_path, text=True, capture_output=True, timeout=120,
                            env={**os.environ, "HOPTUNE_HOME": str(tmp_path / "h")})
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("nightly: cron '15 3 * * *' in UTC; next run ")
    assert "sweeper every 60 s" in result.stdout
