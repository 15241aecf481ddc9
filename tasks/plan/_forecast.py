"""What is left of the running studies, simulated: the metrics endpoint's forecast gauges.

The running studies' remaining work (their trials in flight, from where each
stands, and the trials still to start) goes through the planner's simulator
(``Planner.under_way``) with the hop costs recorded so far. Two figures come
out:

- the predicted seconds until every running study finishes, on the live
  workers and the shards they own (round robin over as many workers where a
  shard has no live owner yet);
- with a deadline (``nightly_deadline``), the fewest workers whose predicted
  finish meets it, and how many of them own each shard (round robin, as
  ``assign_shards`` places them). The deadline counts from the oldest running
  study's start. Where no count up to ``most_workers`` meets it (or the time
  is already up), the count that finishes soonest: the most that still help.

No running study: nothing to finish (0 s, 0 workers wanted). No deadline: no
want (``workers_wanted`` is None). No recorded hops yet: no forecast (None).

The simulation reads the whole history, so ``ForecastCache`` computes it in a
thread at most once every ``every`` seconds and a scrape only reads the last
result: a scrape never waits for it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from hoptune.core import HoptuneError
from hoptune.tuner import StudyDB

__all__ = ["Forecast", "ForecastCache", "forecast"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Forecast:
    seconds_to_finish: float  # on the live workers
    workers_wanted: int | None  # the fewest that meet the deadline; None: no deadline
    shard_workers: dict[tuple[str, int], int]  # of those, the owners of each running shard
    deadline_left: float | None  # seconds of the deadline left; None: no deadline


def forecast(db: StudyDB, deadline: float | None, now: datetime) -> Forecast:
    """The running studies' forecast; raises ``HoptuneError`` when it cannot be made."""
    from hoptune.tasks.plan._plan import Planner, live_owners, most_workers
    from hoptune.tasks.plan._simulate import assign_shards

    running = [s for s in db.studies() if s.state == "running"]
    if not running:
        return Forecast(0.0, None if deadline is None else 0, {}, deadline)
    planner = Planner.under_way(db, running)
    regions = [s.region for s in running]
    seconds = planner.wall(planner.owners(live_owners(db, regions)))
    if deadline is None:
        return Forecast(seconds, None, {}, None)
    left = deadline - (now - min(s.created_at for s in running)).total_seconds()
    walls = {}
    for n in range(1, most_workers(planner) + 1):
        walls[n] = planner.wall(n)
        if walls[n] <= left:
            break
    wanted = n if walls[n] <= left else min(walls, key=lambda k: (walls[k], k))
    owners = assign_shards({i.region.name: len(i.rows) for i in planner.inputs}, wanted)
    return Forecast(seconds, wanted, {s: len(o) for s, o in owners.items()}, left)


class ForecastCache:
    """The last forecast, computed again in a thread when older than ``every`` seconds."""

    def __init__(self, compute: Callable[[], Forecast], every: float) -> None:
        self.compute, self.every = compute, every
        self._lock = threading.Lock()
        self._value: Forecast | None = None
        self._at = float("-inf")  # monotonic time of the last computation's start
        self._thread: threading.Thread | None = None

    def latest(self) -> Forecast | None:
        """The last forecast (None before the first, or when it cannot be made)."""
        with self._lock:
            stale = time.monotonic() - self._at >= self.every
            if stale and (self._thread is None or not self._thread.is_alive()):
                self._at = time.monotonic()
                self._thread = threading.Thread(target=self._refresh, name="forecast",
                                                daemon=True)
                self._thread.start()
            return self._value

    def wait(self, timeout: float | None = None) -> Forecast | None:
        """The forecast once the computation under way (if any) is done."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
        return self._value

    def _refresh(self) -> None:
        try:
            value = self.compute()
        except HoptuneError as exc:  # no recorded hops yet: no forecast until there are
            log.debug("no forecast: %s", exc)
            value = None
        except Exception:  # a bug: said loudly, and the endpoint goes on without a forecast
            log.exception("the forecast failed")
            value = None
        with self._lock:
            self._value = value
