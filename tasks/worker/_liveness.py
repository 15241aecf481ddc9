"""Liveness by heartbeat: each worker process beats, and sweeps when no other one does.

A worker process registers itself in the study database and touches its row
every ``HOPTUNE_HEARTBEAT_SECONDS`` (default 5). A hop whose holder has not
beaten for ``HOPTUNE_LIVENESS_SECONDS`` (default 30) belongs to a worker that
is gone: the sweeper sends it again and a live worker claims it. The workers
also run the sweeper themselves, every ``HOPTUNE_SWEEP_SECONDS`` (default 20),
one at a time under a lock, so a cluster whose drivers and beat are all gone
still recovers from every fault on its own.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable
from datetime import datetime, timedelta

from hoptune.core import ConfigError
from hoptune.tasks.worker._runtime import Runtime
from hoptune.tuner import Locks, WorkerRecords, utcnow

__all__ = ["Heartbeat", "chain_seconds", "host_class", "heartbeat_seconds", "liveness_seconds",
           "live_after", "sweep_seconds"]

log = logging.getLogger(__name__)

SWEEP_LOCK = "sweeper"


def _seconds(name: str, default: float) -> float:
    return float(os.environ.get(name, default))


def heartbeat_seconds() -> float:
    return _seconds("HOPTUNE_HEARTBEAT_SECONDS", 5.0)


def liveness_seconds() -> float:
    """How long a worker may stay silent before its hops are sent to another."""
    return _seconds("HOPTUNE_LIVENESS_SECONDS", 30.0)


def sweep_seconds() -> float:
    return _seconds("HOPTUNE_SWEEP_SECONDS", 20.0)


def chain_seconds() -> float:
    """How long one hop delivery may go on running the next hops whose shard its worker owns
    (``HOPTUNE_CHAIN_SECONDS``, default 1; 0: never, every hop by message). ``ConfigError``
    naming the variable where it is not a number of seconds."""
    value = os.environ.get("HOPTUNE_CHAIN_SECONDS", "1")
    try:
        seconds = float(value)
    except ValueError:
        seconds = float("nan")
    if not seconds >= 0:  # NaN too
        raise ConfigError(f"HOPTUNE_CHAIN_SECONDS: 0 or more seconds, got {value!r}")
    return seconds


def live_after() -> datetime:
    """Heartbeats newer than this belong to live workers."""
    return utcnow() - timedelta(seconds=liveness_seconds())


def host_class() -> str:
    """This host's class (``HOPTUNE_HOST_CLASS``, by default its name): hosts of a class share
    a hop cost in the planner."""
    return os.environ.get("HOPTUNE_HOST_CLASS") or socket.gethostname()


class Heartbeat:
    """A daemon thread: beat every ``heartbeat_seconds``, sweep every ``sweep_seconds``.

    ``sweep`` is called holding the cluster-wide sweeper lock, so one worker
    sweeps at a time; a failed beat or sweep is logged and tried again.
    """

    def __init__(self, rt: Runtime, shards: list[tuple[str, int]],
                 sweep: Callable[[], object] | None = None) -> None:
        self.rt, self.shards, self.sweep = rt, shards, sweep
        self.records = WorkerRecords(rt.db)
        # what the workers table (``hoptune status``, ``hoptune metrics``) shows of this process
        self.info: dict[str, object] = {
            "device": str(rt.device),
            "host_class": host_class(),
            "warm": False}  # True once the warm-up thread has loaded what tasks need
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="hoptune-heartbeat", daemon=True)

    def start(self) -> Heartbeat:
        self.records.register(self.rt.holder, name=self.rt.worker, host=socket.gethostname(),
                              pid=os.getpid(), shards=[list(s) for s in self.shards],
                              info=self.info)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self.records.retire(self.rt.holder)

    def warm(self) -> None:
        """Say at once that this process has warmed up (the next beats say it again)."""
        self.info["warm"] = True
        try:
            self.records.beat(self.rt.holder, self.info)
        except Exception:  # noqa: BLE001 - the next beat records it
            log.warning("heartbeat of %s failed", self.rt.holder, exc_info=True)

    def _run(self) -> None:
        beat, every = heartbeat_seconds(), sweep_seconds()
        waited = 0.0
        while not self._stop.wait(beat):
            try:
                if not self.records.beat(self.rt.holder, self.info):
                    self.start_row()
            except Exception:  # noqa: BLE001 - the database may be briefly away: beat again
                log.warning("heartbeat of %s failed", self.rt.holder, exc_info=True)
            waited += beat
            if self.sweep is not None and waited >= every:
                waited = 0.0
                self._sweep_once(every)

    def start_row(self) -> None:
        self.records.register(self.rt.holder, name=self.rt.worker, host=socket.gethostname(),
                              pid=os.getpid(), shards=[list(s) for s in self.shards],
                              info=self.info)

    def _sweep_once(self, every: float) -> None:
        locks = Locks(self.rt.db)
        try:
            if locks.acquire(SWEEP_LOCK, self.rt.holder, every * 0.9) is not None:
                return  # another worker swept within the interval
            assert self.sweep is not None
            self.sweep()
        except Exception:  # noqa: BLE001 - logged; the next interval sweeps again
            log.warning("sweep from %s failed", self.rt.holder, exc_info=True)
