"""What the dashboard reads from slow sources in the background: the broker, the registry.

A page's request reads the study database only. The broker's queue depths
(``hoptune.tasks.study.queue_lengths``, as ``hoptune metrics`` reads them),
the workers' answers to Celery's ``stats`` (their device and kernel paths, as
``hoptune status`` reads them) and the registry's cards are read by one daemon
thread every ``every`` seconds, and a request takes the last values: a page
never waits on a broker round trip or on reading hundreds of cards.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from hoptune.core import Settings, Store
from hoptune.tasks.worker import hop_queue
from hoptune.tuner import StudyDB, champion_version

if TYPE_CHECKING:
    from celery import Celery

__all__ = ["Registry", "Sample", "Sampler"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Sample:
    """One reading of the slow sources; ``at`` is when it was taken (``time.time()``)."""

    at: float = 0.0
    depths: dict[str, int] = field(default_factory=dict)  # queue name: messages waiting
    workers: dict[str, dict[str, Any]] = field(default_factory=dict)  # node: its stats row
    workers_why: str = ""  # why no worker row came back (no broker, none answers)
    registry: dict[str, dict[str, Any]] = field(default_factory=dict)  # region: its versions


_VERSION = re.compile(r"v\d{4,}")  # a version folder's name, as the registry names them
#: What the pages show of a version's card (its weights' provenance stays in the registry).
CARD_FIELDS = ("version", "created_at", "family", "metric_name", "metric", "minimize",
               "study_id", "trial_number", "selected_epoch", "previous", "previous_metric",
               "compared_on", "reason", "params")


class Registry:
    """Each region of the registry: its champion's version and every promoted version's card
    (``CARD_FIELDS`` of it), oldest first. A version's card never changes once written
    (the registry moves a version into place whole), so each card is read once."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._cards: dict[str, dict[str, Any]] = {}

    def read(self) -> dict[str, dict[str, Any]]:
        found: dict[str, list[dict[str, Any]]] = {}
        for key in self.store.list("models"):
            parts = key.split("/")
            if len(parts) == 4 and parts[3] == "card.json" and _VERSION.fullmatch(parts[2]):
                if key not in self._cards:
                    card = self.store.read_json(key)
                    self._cards[key] = {k: card.get(k) for k in CARD_FIELDS}
                found.setdefault(parts[1], []).append(self._cards[key])
        return {region: {"champion": champion_version(self.store, region),
                         "versions": sorted(cards, key=lambda c: int(c["version"][1:]))}
                for region, cards in sorted(found.items())}


class Sampler:
    """The daemon thread that takes a ``Sample`` every ``every`` seconds."""

    def __init__(self, settings: Settings, db: StudyDB, store: Store, app: Celery | None,
                 every: float = 3.0, workers_every: float = 10.0) -> None:
        self.settings, self.db, self.store, self.app = settings, db, store, app
        self.every, self.workers_every = every, workers_every
        self._sample = Sample()
        self._workers_at = float("-inf")
        self.registry = Registry(store)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="dashboard-sampler", daemon=True)

    def latest(self) -> Sample:
        return self._sample

    def start(self) -> Sampler:
        """Take the first sample now (so the first page has it), then one every ``every`` s."""
        self._take()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5.0)

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self._take()

    def _take(self) -> None:
        old = self._sample
        try:
            depths = self._depths()
        except Exception:  # a broker away for a moment: the last depths stand
            log.warning("reading the queue depths failed", exc_info=True)
            depths = old.depths
        workers, why = old.workers, old.workers_why
        # asked again at every sample while none has answered (the workers may be starting)
        if not workers or time.monotonic() - self._workers_at >= self.workers_every:
            self._workers_at = time.monotonic()
            try:
                workers, why = self._workers()
            except Exception:
                log.warning("asking the workers for their stats failed", exc_info=True)
        try:
            cards = self.registry.read()
        except Exception:
            log.warning("reading the registry failed", exc_info=True)
            cards = old.registry
        self._sample = Sample(time.time(), depths, workers, why, cards)

    def _depths(self) -> dict[str, int]:
        """Messages waiting in each shard queue of the running studies."""
        from hoptune.tasks.study import queue_lengths
        from hoptune.tasks.worker import ping, socket_url

        url = self.settings.broker_url or socket_url(self.settings.embedded_socket)
        if self.app is None or not ping(url):
            return {}

        length = queue_lengths(self.app)
        queues = [hop_queue(s.region, shard) for s in self.db.studies()
                  if s.state == "running" for shard in range(int(s.region_config["shards"]))]
        return {queue: length(queue) for queue in queues}

    def _workers(self) -> tuple[dict[str, dict[str, Any]], str]:
        if self.app is None:
            return {}, "no broker"
        from hoptune.tasks.worker import answering_workers

        rows, why = answering_workers(self.settings, self.app)
        return {row["worker"]: row for row in rows}, why
