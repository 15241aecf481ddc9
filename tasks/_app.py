"""The Celery application and its tasks: thin, each parses JSON and calls plain functions."""

from __future__ import annotations

import logging
import os
from typing import Any

from celery import Celery, Task
from celery.signals import worker_process_init
from sqlalchemy.exc import InterfaceError, OperationalError

from tasks._hop import Dispatch, HopReport, run_hop
from tasks._nightly import start_nightly
from tasks._promotion import promote_study
from tasks._runtime import parse_shard_spec, runtime
from tasks._sweeper import sweep
from tasks._workflow import tune_step

__all__ = ["app", "send"]

log = logging.getLogger(__name__)

app = Celery("hoptune")
app.config_from_object("tasks.celeryconfig")


def send(dispatches: list[Dispatch], celery_app: Celery | None = None) -> None:
    """Send each message to its queue."""
    target = celery_app or app
    for d in dispatches:
        target.send_task(d.task, kwargs=d.kwargs, queue=d.queue)


# Errors worth another try: the study database or the broker was briefly unreachable.
TRANSIENT = (OperationalError, InterfaceError, ConnectionError, TimeoutError)


@app.task(name="hoptune.hop", bind=True, acks_late=True, reject_on_worker_lost=True,
          autoretry_for=TRANSIENT, retry_backoff=True, retry_backoff_max=60, max_retries=10)
def hop(self: Task, *, region: str, study: int, trial: int, epoch: int, position: int,
        shard: int) -> dict[str, Any]:
    """Train trial ``trial`` once over shard ``shard`` of ``region``, then hand on."""

    def progress(report: HopReport) -> None:
        self.send_event("task-progress", region=region, study=study, trial=trial, epoch=epoch,
                        shard=report.shard, loss=report.loss, samples=report.samples,
                        samples_per_s=report.samples / report.train_seconds
                        if report.train_seconds else None)

    report = run_hop(runtime(), int(trial), int(epoch), int(position), on_progress=progress)
    send(report.dispatch, self.app)
    return {"trained": report.trained, "loss": report.loss, "skipped": report.skipped}


@app.task(name="hoptune.tune_step", bind=True, acks_late=True, autoretry_for=TRANSIENT,
          retry_backoff=True, retry_backoff_max=60, max_retries=10)
def tune_step_task(self: Task, *, study: int) -> int:
    """Fill the free trial slots of study ``study``."""
    dispatches = tune_step(runtime(), int(study))
    send(dispatches, self.app)
    return len(dispatches)


@app.task(name="hoptune.promote", bind=True, acks_late=True, autoretry_for=TRANSIENT,
          retry_backoff=True, retry_backoff_max=60, max_retries=10)
def promote_task(self: Task, *, study: int) -> dict[str, Any]:
    """Promote study ``study``'s best trial to champion of its region if it is better."""
    return promote_study(runtime(), int(study))


@app.task(name="hoptune.nightly", bind=True, acks_late=True)
def nightly_task(self: Task, *, regions: list[str] | None = None) -> int | None:
    """The scheduled nightly run: re-ingest, tune warm, promote, for every region."""
    from regions import StudyError, load_config

    rt = runtime()
    try:
        run_id, dispatches = start_nightly(rt, load_config(rt.settings.config_path), regions,
                                           trigger="beat")
    except StudyError as exc:
        log.warning("nightly run not started: %s", exc)
        return None
    send(dispatches, self.app)
    return run_id


@app.task(name="hoptune.sweep", bind=True, acks_late=True)
def sweep_task(self: Task, *, stall_seconds: float | None = None) -> int:
    """Re-send the work of trials whose progress stalled."""
    dispatches = sweep(runtime(), stall_seconds)
    send(dispatches, self.app)
    return len(dispatches)


@worker_process_init.connect
def _preload_shards(**_: Any) -> None:
    """Load the shards this worker owns into memory before its first hop."""
    import torch

    torch.set_num_threads(int(os.environ.get("HOPTUNE_TORCH_THREADS", "1")))
    # torch loads its compiler stack (about a second) on the first optimizer of a process:
    # pay for it at start rather than in the first hop
    torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)
    spec = os.environ.get("HOPTUNE_WORKER_SHARDS")
    if spec:
        runtime().preload(parse_shard_spec(spec))
