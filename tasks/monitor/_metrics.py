"""Signals for an autoscaler: a Prometheus endpoint over the broker and the study database.

Every figure is read at scrape time (a custom collector), so the endpoint holds
no state of its own and any number of them may run: what it exports is what
the broker and the study database say at that moment.

- ``hoptune_queue_depth{queue,region,shard}``: messages waiting in a shard
  queue (the broker's own count; an autoscaler's first signal).
- ``hoptune_queue_oldest_seconds{queue,region,shard}``: how long the oldest
  hop recorded as queued for that shard has waited (0 when none waits).
- ``hoptune_hops_running{region}``: hops claimed by a worker and not finished.
- ``hoptune_worker_busy_share{worker,device}``: the share of the last
  ``window`` seconds each worker spent holding hops (0 to 1), for every worker
  whose heartbeat is live.
- ``hoptune_worker_up{worker,device}``: 1 while a worker's heartbeat is live.
- ``hoptune_trials{region,state}``: trials of each region's latest study by state.
- ``hoptune_studies_running``: studies running now.
- ``hoptune_predicted_seconds_to_finish``: the simulator's seconds until every
  running study finishes on the live workers (0 when none runs).
- ``hoptune_workers_wanted``: the fewest workers the simulator says finish the
  running studies within ``nightly_deadline`` (0 when none runs), and
  ``hoptune_shard_workers_wanted{queue,region,shard}`` how many of them own
  each shard: the figures a KEDA trigger scales a shard's workers by.
  Without a deadline there is no want: both have no sample.

The last three come from ``tasks.plan._forecast``, computed in a thread at most
every ``forecast_every`` seconds: a scrape reads the last forecast and never
waits for one. Before the first one (and while no hop is recorded to fit the
costs from) they have no sample.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry

from hoptune.core import Settings
from hoptune.tasks.plan import Forecast, ForecastCache, forecast
from hoptune.tasks.worker import hop_queue, live_after
from hoptune.tuner import HopRecords, HopRow, StudyDB, StudyRow, WorkerRecords, utcnow

if TYPE_CHECKING:
    from celery import Celery

__all__ = ["BUSY_WINDOW_SECONDS", "FORECAST_EVERY_SECONDS", "ClusterCollector", "busy_shares",
           "start_metrics"]

BUSY_WINDOW_SECONDS = 300.0
FORECAST_EVERY_SECONDS = 30.0
TRIAL_STATES = ("pending", "running", "done", "pruned", "failed")


def busy_shares(hops: list[HopRow], now: datetime, window: float
                ) -> dict[str, float]:
    """Each worker's share of the last ``window`` seconds spent holding a hop.

    A hop holds its worker from ``started_at`` to ``finished_at`` (to ``now``
    while it runs); only the part inside the window counts, and overlapping
    hops on one worker (several processes under one name) are counted once.
    """
    start = now - timedelta(seconds=window)
    spans: dict[str, list[tuple[datetime, datetime]]] = defaultdict(list)
    for hop in hops:
        if hop.worker is None or hop.started_at is None:
            continue
        if hop.state not in ("running", "done"):
            continue
        end = hop.finished_at if hop.state == "done" else now
        if end is None:
            continue
        lo, hi = max(hop.started_at, start), min(end, now)
        if hi > lo:
            spans[hop.worker].append((lo, hi))
    shares = {}
    for worker, parts in spans.items():
        parts.sort()
        busy, (lo, hi) = 0.0, parts[0]
        for a, b in parts[1:]:
            if a > hi:
                busy += (hi - lo).total_seconds()
                lo, hi = a, b
            else:
                hi = max(hi, b)
        busy += (hi - lo).total_seconds()
        shares[worker] = min(1.0, busy / window)
    return shares


class ClusterCollector(Collector):
    """The cluster's gauges, read from the broker and the study database on each scrape."""

    def __init__(self, db: StudyDB, shards: dict[str, int],
                 queue_length: Callable[[str], int], window: float = BUSY_WINDOW_SECONDS,
                 *, deadline: float | None = None,
                 forecast_every: float = FORECAST_EVERY_SECONDS) -> None:
        self.db, self.shards, self.queue_length, self.window = db, shards, queue_length, window
        self.forecasts = ForecastCache(lambda: forecast(db, deadline, utcnow()), forecast_every)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        now = utcnow()
        studies = self.db.studies()
        latest: dict[str, StudyRow] = {}
        for study in studies:
            if study.region not in latest or study.id > latest[study.region].id:
                latest[study.region] = study
        running = [s for s in studies if s.state == "running"]
        hops = [h for s in running for h in HopRecords(self.db).all(study_id=s.id)]
        regions = {s.id: s.region for s in running}
        trial_study = {t.id: t.study_id for s in running for t in self.db.trials(s.id)}

        depth = GaugeMetricFamily("hoptune_queue_depth", "messages waiting in a shard queue",
                                  labels=["queue", "region", "shard"])
        oldest = GaugeMetricFamily("hoptune_queue_oldest_seconds",
                                   "seconds the oldest hop queued for a shard has waited",
                                   labels=["queue", "region", "shard"])
        waited: dict[tuple[str, int], float] = defaultdict(float)
        running_hops: dict[str, int] = defaultdict(int)
        for hop in hops:
            region = regions[trial_study[hop.trial_id]]
            if hop.state == "queued":
                age = (now - hop.queued_at).total_seconds()
                waited[region, hop.shard] = max(waited[region, hop.shard], age)
            elif hop.state == "running":
                running_hops[region] += 1
        shards = {**self.shards, **{s.region: int(s.region_config["shards"])
                                    for s in running}}
        for region, count in sorted(shards.items()):
            for shard in range(count):
                queue = hop_queue(region, shard)
                labels = [queue, region, str(shard)]
                depth.add_metric(labels, float(self.queue_length(queue)))
                oldest.add_metric(labels, waited[region, shard])
        yield depth
        yield oldest

        hops_running = GaugeMetricFamily("hoptune_hops_running",
                                         "hops claimed by a worker and not finished",
                                         labels=["region"])
        for region in sorted(latest):
            hops_running.add_metric([region], float(running_hops[region]))
        yield hops_running

        records = WorkerRecords(self.db)
        live = records.live(live_after())
        recent = HopRecords(self.db).since(now - timedelta(seconds=self.window))
        shares = busy_shares(recent, now, self.window)
        busy = GaugeMetricFamily("hoptune_worker_busy_share",
                                 f"share of the last {self.window:.0f} s a worker held hops",
                                 labels=["worker", "device"])
        up = GaugeMetricFamily("hoptune_worker_up", "1 while a worker's heartbeat is live",
                               labels=["worker", "device"])
        seen = set()
        for worker in sorted(live, key=lambda w: w["name"]):
            if worker["name"] in seen:
                continue
            seen.add(worker["name"])
            device = str((worker["info"] or {}).get("device", "unknown"))
            busy.add_metric([worker["name"], device], shares.get(worker["name"], 0.0))
            up.add_metric([worker["name"], device], 1.0)
        yield busy
        yield up

        trials = GaugeMetricFamily("hoptune_trials", "trials of a region's latest study by state",
                                   labels=["region", "state"])
        for region, study in sorted(latest.items()):
            counts = self.db.counts(study.id)
            for state in TRIAL_STATES:
                trials.add_metric([region, state], float(counts.get(state, 0)))
        yield trials
        yield GaugeMetricFamily("hoptune_studies_running", "studies running now",
                                value=float(len(running)))
        yield from _forecast_gauges(self.forecasts.latest())


def _forecast_gauges(f: Forecast | None) -> Iterator[GaugeMetricFamily]:
    finish = GaugeMetricFamily("hoptune_predicted_seconds_to_finish",
                               "the simulator's seconds until the running studies finish on "
                               "the live workers")
    wanted = GaugeMetricFamily("hoptune_workers_wanted",
                               "the fewest workers predicted to finish the running studies "
                               "within nightly_deadline")
    per_shard = GaugeMetricFamily("hoptune_shard_workers_wanted",
                                  "of hoptune_workers_wanted, the workers that own a shard",
                                  labels=["queue", "region", "shard"])
    if f is not None:
        finish.add_metric([], f.seconds_to_finish)
        if f.workers_wanted is not None:
            wanted.add_metric([], float(f.workers_wanted))
        for (region, shard), n in sorted(f.shard_workers.items()):
            per_shard.add_metric([hop_queue(region, shard), region, str(shard)], float(n))
    yield finish
    yield wanted
    yield per_shard


def start_metrics(settings: Settings, shards: dict[str, int], port: int, addr: str = "0.0.0.0",
                  app: Celery | None = None, forecast_every: float = FORECAST_EVERY_SECONDS
                  ) -> Callable[[], None]:
    """Serve the cluster's gauges at http://addr:port/metrics in a thread; returns its stop.

    ``shards`` names the queues to report even while no study of theirs runs
    (the configured regions); a running study's region is always reported.
    """
    from prometheus_client import start_http_server

    from hoptune.tasks import app as default_app
    from hoptune.tasks.study import queue_lengths

    registry = CollectorRegistry()
    registry.register(ClusterCollector(StudyDB(settings.database_url), shards,
                                       queue_lengths(app or default_app),
                                       deadline=settings.nightly_deadline,
                                       forecast_every=forecast_every))
    server, thread = start_http_server(port, addr=addr, registry=registry)

    def stop() -> None:
        server.shutdown()
        server.server_close()
        thread.join()

    return stop
