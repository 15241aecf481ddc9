"""The schedule celery beat runs: the nightly retraining, and the sweeper every minute.

``hoptune beat`` is celery beat with this schedule; run exactly one per
cluster. The nightly task goes to the control queue at the configuration's
cron time in its time zone (default 02:00 UTC).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from celery.schedules import crontab

from hoptune.core import ConfigError
from hoptune.regions import Config
from hoptune.tasks.worker import CONTROL_QUEUE

__all__ = ["beat_schedule", "nightly_crontab", "SWEEP_EVERY"]

SWEEP_EVERY = 60.0


def nightly_crontab(config: Config) -> crontab:
    """The configuration's cron expression as a celery crontab, in its time zone."""
    from zoneinfo import ZoneInfo

    fields = config.schedule.cron.split()
    minute, hour, day_of_month, month_of_year, day_of_week = fields
    try:
        schedule = crontab(minute=minute, hour=hour, day_of_month=day_of_month,
                           month_of_year=month_of_year, day_of_week=day_of_week)
    except ValueError as exc:
        raise ConfigError(f"{config.path.name}: schedule.cron: {exc} "
                          f"(got {config.schedule.cron!r})") from None
    schedule.tz = ZoneInfo(config.schedule.timezone)
    return schedule


def beat_schedule(config: Config) -> dict[str, dict[str, Any]]:
    """celery beat's ``beat_schedule`` for this configuration."""
    return {
        "hoptune-nightly": {"task": "hoptune.nightly", "schedule": nightly_crontab(config),
                            "options": {"queue": CONTROL_QUEUE}},
        "hoptune-sweep": {"task": "hoptune.sweep", "schedule": SWEEP_EVERY,
                          "options": {"queue": CONTROL_QUEUE}},
    }


def next_nightly(config: Config, now: datetime) -> datetime:
    """When the nightly run is next due after ``now`` (aware), in the schedule's time zone."""
    s = nightly_crontab(config)
    local = now.astimezone(s.tz).replace(second=0, microsecond=0) + timedelta(minutes=1)
    for _ in range(366 * 24 * 60):
        if (local.month in s.month_of_year and local.day in s.day_of_month
                and local.isoweekday() % 7 in s.day_of_week and local.hour in s.hour
                and local.minute in s.minute):
            return local
        local += timedelta(minutes=1)
    raise ConfigError(f"{config.path.name}: schedule.cron: {config.schedule.cron!r} "
                      f"never comes due")
