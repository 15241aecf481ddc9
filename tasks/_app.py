"""The Celery application and its tasks: thin, each parses JSON and calls plain functions."""

from __future__ import annotations

import importlib
import json
import logging
import os
import threading
import time
from typing import TYPE_CHECKING, Any

from celery import Celery, Task
from celery.signals import worker_process_init, worker_process_shutdown

from hoptune.tasks.study import sweep
from hoptune.tasks.worker import (
    AMQP,
    RETRY_SECONDS,
    TRANSIENT,
    BadMessage,
    Dispatch,
    Heartbeat,
    WorkerInfoStep,
    keep_freed_memory,
    parse_cohort,
    parse_hop,
    parse_shard_spec,
    publish_worker_info,
    record_dead_letter,
    runtime,
    worker_info,
)

if TYPE_CHECKING:
    from hoptune.tasks.hop import HopReport

__all__ = ["app", "send"]

# The tasks' bodies import what trains (torch, the workflow) when they run, and a
# worker imports it all as it starts (``_start_training_process``): a command that
# only sends messages with this app never imports torch.
_TRAINING_MODULES = ("hoptune.tasks.hop._hop", "hoptune.tasks.hop._cohort_hop",
                     "hoptune.tasks.study._workflow", "hoptune.tasks.study._nightly",
                     "hoptune.tasks.study._promotion")

log = logging.getLogger(__name__)

app = Celery("hoptune", amqp=AMQP)
app.config_from_object("hoptune.tasks.celeryconfig")
app.steps["worker"].add(WorkerInfoStep)


def send(dispatches: list[Dispatch], celery_app: Celery | None = None,
         countdown: float | None = None) -> None:
    """Send each message to its queue (``countdown``: to run no sooner than that many seconds
    from now)."""
    target = celery_app or app
    for d in dispatches:
        target.send_task(d.task, kwargs=d.kwargs, queue=d.queue, countdown=countdown)


@app.task(name="hoptune.hop", bind=True, acks_late=True, reject_on_worker_lost=True,
          autoretry_for=TRANSIENT, retry_backoff=True, retry_backoff_max=60, max_retries=10)
def hop(self: Task, *args: Any, **kwargs: Any) -> dict[str, Any]:
    """Train a trial once over one shard of its region, then hand on."""
    from hoptune.tasks.hop import run_hop, wait_written
    from hoptune.tasks.study import go_on_here

    queue = (self.request.delivery_info or {}).get("routing_key")
    try:
        if args:
            raise BadMessage(f"hop takes keyword arguments only, got {len(args)} positional")
        message = parse_hop(kwargs, queue)
    except BadMessage as exc:
        set_aside(self.app, queue or "?", str(exc), json.dumps([args, kwargs], default=repr))
        return {"trained": False, "skipped": f"set aside: {exc}"}

    started = time.monotonic()
    rt = runtime()
    progress = _Progress(self, rt, message.region, message.study)
    report = run_hop(rt, message.trial, message.epoch, message.position, on_progress=progress,
                     message=message, again=_came_before(self))
    if report.set_aside is not None:  # the study database does not record the hop so
        set_aside(self.app, queue or "?", report.set_aside, json.dumps([args, kwargs]))
        return {"trained": False, "skipped": report.skipped}

    def sending(dispatches: list[Dispatch], countdown: float | None = None) -> None:
        send(dispatches, self.app, countdown=countdown)
        progress.send()  # after the hand-on: the next hop need not wait for the event

    here = go_on_here(rt, report, sending, started=started, on_progress=progress)
    _publish(rt)  # its count of hops, once the hops it ran are handed on
    wait_written(report, *here)  # the task ends once its checkpoints are written behind
    if report.retry:  # failed once with an error that may not repeat: once more, later
        raise self.retry(countdown=RETRY_SECONDS, max_retries=None)
    return {"trained": report.trained, "loss": report.loss, "skipped": report.skipped,
            "ran_here": len(here)}


class _Progress:
    """The progress event of each trained hop (Flower shows it): ``run_hop`` hands it the
    hop's report, and the task sends the events once the next hop is on its way."""

    def __init__(self, task: Task, rt: Any, region: str, study: int) -> None:
        self.task, self.rt, self.region, self.study = task, rt, region, study
        self.reports: list[HopReport] = []

    def __call__(self, report: HopReport) -> None:
        self.reports.append(report)

    def send(self) -> None:
        for report in self.reports:
            try:
                info = worker_info(self.rt)  # written to its file at the delivery's end
                self.task.send_event(
                    "task-progress", region=self.region, study=self.study,
                    trial=report.trial_id, epoch=report.epoch, shard=report.shard,
                    loss=report.loss, samples=report.samples,
                    samples_per_s=report.samples / report.train_seconds
                    if report.train_seconds else None,
                    device=info["device_name"], kernels=info["kernel_summary"])
            except Exception:  # noqa: BLE001 - an event the broker could not take costs no hop
                log.warning("hop of trial %d: its progress event was not sent", report.trial_id,
                            exc_info=True)
        self.reports.clear()


@app.task(name="hoptune.cohort_hop", bind=True, acks_late=True, reject_on_worker_lost=True,
          autoretry_for=TRANSIENT, retry_backoff=True, retry_backoff_max=60, max_retries=10)
def cohort_hop(self: Task, *args: Any, **kwargs: Any) -> dict[str, Any]:
    """Train several trials once over one shard as one fused model, then hand each on."""
    from hoptune.tasks.hop import run_cohort_hop, wait_written
    from hoptune.tasks.study import hand_on_cohort

    queue = (self.request.delivery_info or {}).get("routing_key")
    try:
        if args:
            raise BadMessage(f"cohort hop takes keyword arguments only, got {len(args)} "
                             f"positional")
        message = parse_cohort(kwargs, queue)
    except BadMessage as exc:
        set_aside(self.app, queue or "?", str(exc), json.dumps([args, kwargs], default=repr))
        return {"trained": [], "skipped": f"set aside: {exc}"}
    rt = runtime()
    progress = _Progress(self, rt, message.region, message.study)
    reports = run_cohort_hop(rt, message.trials, message.epochs, message.position, message.shard,
                             on_progress=progress, message=message, again=_came_before(self))
    for reason in dict.fromkeys(r.set_aside for r in reports if r.set_aside is not None):
        set_aside(self.app, queue or "?", reason, json.dumps([args, kwargs]))
    send(hand_on_cohort(rt, reports), self.app)
    progress.send()
    _publish(rt)
    wait_written(*reports)
    if any(r.retry for r in reports):  # a member failed once: the message once more, later
        raise self.retry(countdown=RETRY_SECONDS, max_retries=None)
    return {"trained": [r.trial_id for r in reports if r.trained],
            "skipped": {str(r.trial_id): r.skipped for r in reports if r.skipped}}


def _publish(rt: Any) -> None:
    """Write this process's info (its count of hops trained, its kernels' paths) for ``stats``,
    once per delivery: a file written after each hop of a chain would lengthen the chain."""
    try:
        publish_worker_info(rt)
    except Exception:  # noqa: BLE001 - stats show the last info written; no hop waits on it
        log.warning("this worker's info could not be written", exc_info=True)


def _came_before(task: Task) -> bool:
    """Whether this message was delivered before: a broker's redelivery (its worker was lost)
    or a retry. Its earlier delivery may have done the hop and stopped before handing on;
    a fresh copy's has not, and a copy hands on nothing (``run_hop``'s ``again``)."""
    return bool((task.request.delivery_info or {}).get("redelivered") or task.request.retries)


def _unknown_study(task: Task, study: int) -> bool:
    """Set aside a workflow message naming a study the database does not have; True if so."""
    from hoptune.core import StudyError

    try:
        runtime().db.study(study)
    except StudyError as exc:
        queue = (task.request.delivery_info or {}).get("routing_key") or "?"
        set_aside(task.app, queue, f"{task.name}: {exc}", json.dumps({"study": study}))
        return True
    return False


def set_aside(celery_app: Celery, queue: str, reason: str, body: str) -> None:
    """Log a message no worker may act on, once, and keep it in the dead letters (the Redis
    list, or RabbitMQ's dead-letter queue through its dead-letter exchange)."""
    log.error("message on queue %s set aside: %s", queue, reason)
    with celery_app.connection_for_write() as conn:
        record_dead_letter(conn, queue, reason, body)


@app.task(name="hoptune.tune_step", bind=True, acks_late=True, autoretry_for=TRANSIENT,
          retry_backoff=True, retry_backoff_max=60, max_retries=10)
def tune_step_task(self: Task, *, study: int) -> int:
    """Fill the free trial slots of study ``study``."""
    from hoptune.tasks.study import tune_step

    if _unknown_study(self, study):
        return 0
    dispatches = tune_step(runtime(), int(study))
    send(dispatches, self.app)
    return len(dispatches)


@app.task(name="hoptune.promote", bind=True, acks_late=True, autoretry_for=TRANSIENT,
          retry_backoff=True, retry_backoff_max=60, max_retries=10)
def promote_task(self: Task, *, study: int) -> dict[str, Any]:
    """Promote study ``study``'s best trial to champion of its region if it is better."""
    from hoptune.tasks.study import promote_study

    return promote_study(runtime(), int(study))


@app.task(name="hoptune.nightly", bind=True, acks_late=True)
def nightly_task(self: Task, *, regions: list[str] | None = None) -> int | None:
    """The scheduled nightly run: re-ingest, tune warm, promote, for every region."""
    from hoptune.core import StudyError
    from hoptune.regions import load_config
    from hoptune.tasks.plan import ingest_region, log_nightly_plan
    from hoptune.tasks.study import start_nightly

    rt = runtime()
    config = load_config(rt.settings.config_path)
    try:
        # shards = "auto" chosen from the measured costs and the live workers, as the CLI's
        run_id, dispatches = start_nightly(rt, config, regions, trigger="beat",
                                           ingested=ingest_region)
    except StudyError as exc:
        log.warning("nightly run not started: %s", exc)
        return None
    send(dispatches, self.app)
    log_nightly_plan(rt, config, run_id)
    return run_id


@app.task(name="hoptune.sweep", bind=True, acks_late=True)
def sweep_task(self: Task) -> int:
    """Send again whatever work a fault may have lost (see ``_sweeper``)."""
    dispatches = sweep(runtime(), self.app)
    send(dispatches, self.app)
    return len(dispatches)


@worker_process_init.connect
def _start_training_process(**_: Any) -> None:
    """Set up the worker's device, then warm up in the background while it takes tasks.

    The training process takes its first task as soon as torch and the workflow
    are imported. What only some tasks need (torch's compiler stack, which the
    first optimizer of a process imports; the shards this worker owns;
    scikit-optimize, which ``tune_step`` needs) loads in a background thread, so
    on a cold start the first ``tune_step`` and the first hop do not wait for
    all of it; a task that needs a part still loading waits for that part only.
    """
    import torch

    from hoptune import kernels

    keep_freed_memory()  # a hop's checkpoint-sized buffers reused, not faulted in anew
    torch.set_num_threads(int(os.environ.get("HOPTUNE_TORCH_THREADS", "1")))
    for name in _TRAINING_MODULES:
        importlib.import_module(name)
    rt = runtime()
    kernels.configure(cache_dir=rt.settings.cache_dir)
    log.info("worker %s trains on %s (kernels: %s)", rt.worker, rt.device, kernels.mode())
    spec = os.environ.get("HOPTUNE_WORKER_SHARDS")
    shards = parse_shard_spec(spec) if spec else []
    global _heartbeat
    _heartbeat = Heartbeat(rt, shards, sweep=lambda: send(sweep(rt, app), app)).start()
    publish_worker_info(rt)
    threading.Thread(target=_warm_up, args=(rt, shards), name="hoptune-warm-up",
                     daemon=True).start()


def _warm_up(rt: Any, shards: list[tuple[str, int]]) -> None:
    """Load what the first hop, the first ``tune_step`` and the first epoch's validation need,
    in that order; then say so in the heartbeat row (``warm``), also when a part failed (its
    task reports it)."""
    try:
        import torch

        # torch imports its compiler stack (seconds) on the first optimizer of a process
        torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)
        if shards:
            rt.preload(shards)
        importlib.import_module("hoptune.tuner._optimizer")  # scikit-optimize
        # the built-in metrics' torchmetrics: half a second that a fresh worker's first
        # validation paid, holding its worker and the trial's epoch end
        importlib.import_module("torchmetrics.functional")
    except Exception:  # noqa: BLE001 - a task that needs the part fails with the cause
        log.warning("warm-up of %s stopped", rt.worker, exc_info=True)
    finally:
        if _heartbeat is not None:
            _heartbeat.warm()


_heartbeat: Heartbeat | None = None


@worker_process_shutdown.connect
def _retire(**_: Any) -> None:
    """A worker process that stops cleanly leaves no hop waiting on its heartbeat."""
    if _heartbeat is not None:
        _heartbeat.stop()
