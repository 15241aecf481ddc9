"""A hop: one trial trained once over one shard, then handed on.

``run_hop`` is the whole logic of the hop task, callable without Celery. It
returns the messages to send next as ``Dispatch`` values; the task sends them.
After an epoch's last hop it returns the epoch's end (``EpochEnd``) for the
workflow to decide on, rather than calling up into it.
Exactly-once effect under at-least-once delivery: the output checkpoint is
keyed by (trial, epoch, position), a delivery that finds it does no training,
and the next hop is queued in the same transaction that records this one, so
a redelivered hop never hands on twice. A delivery that finds its hop done
sends the next hop again only if its message came before (a broker's
redelivery, a retry: that earlier delivery may have stopped before sending);
a copy costs its own delivery and no more, however long the trial.
Before any of this, the message is checked against the study database and
this worker's shards (``_admission``); one that fails is set aside.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import torch

from hoptune.core import CheckpointError
from hoptune.regions import RegionConfig
from hoptune.tasks.hop._admission import Admitted, admission, admit
from hoptune.tasks.hop._delivery import Claimed, EpochEnd, HopReport
from hoptune.tasks.hop._training import (
    TrainedPass,
    bare_trial_model,
    build_trial_model,
    make_trial_optimizer,
    train_pass,
)
from hoptune.tasks.worker import (
    TRANSIENT,
    Checkpoint,
    Dispatch,
    HopMessage,
    Runtime,
    checkpoint_key,
    describe,
    hop_dispatch,
    keep_final,
    live_after,
    liveness_seconds,
    load_checkpoint,
    previous_position,
    region_of,
    set_aside,
    study_manifest,
    tune_step_after_end,
)
from hoptune.tuner import ACTIVE_STATES, EpochRow, HopRecords, StudyRow, TrialRow, utcnow

__all__ = ["BuildFailed", "claim", "finish", "model_at", "readable", "release", "restore",
           "restore_trial", "rewind", "run_hop", "save", "set_aside_report", "train_alone",
           "wait_written"]

log = logging.getLogger(__name__)


def restore_trial(rt: Runtime, region: RegionConfig, study: StudyRow,
                  trial: TrialRow, epoch: int, position: int, meta: dict[str, Any]
                  ) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    """The model and optimizer a hop at (epoch, position) starts from, on the worker's device.

    Where this process trained the hop before and the store still holds what it
    wrote (``LatestCheckpoints``), they are that hop's own model and optimizer,
    whose tensors the checkpoint is: nothing is built or loaded.
    """
    params = trial.params
    before = previous_position(epoch, position, region.shards)
    if before is None:
        model = build_trial_model(region, params, trial.seed, meta, rt.device)
        return model, make_trial_optimizer(region, params, model)
    kept = rt.latest.take_trained(rt.store, trial.id, checkpoint_key(study.id, trial.id, *before))
    if kept is not None and kept[1] is not None:  # what wrote it, in this process: train on
        return kept[1]
    model, checkpoint = model_at(rt, region, study, trial, *before, meta,
                                 kept=None if kept is None else kept[0])
    optimizer = make_trial_optimizer(region, params, model)
    optimizer.load_state_dict(checkpoint.optimizer)
    return model, optimizer


def model_at(rt: Runtime, region: RegionConfig, study: StudyRow, trial: TrialRow,
             epoch: int, position: int, meta: dict[str, Any], *, kept: Checkpoint | None = None
             ) -> tuple[torch.nn.Module, Checkpoint]:
    """The trial's model as hop (epoch, position) left it, and that hop's checkpoint.

    The checkpoint loads straight onto the worker's device, and the model, built
    without memory (on the meta device), takes its tensors as its own: no
    initialisation that the load would overwrite, no copy. ``kept``: that
    checkpoint as this worker kept it in memory when it wrote it (the store still
    holds the same, ``LatestCheckpoints.take``), read instead of the store. A checkpoint not
    stored yet is waited for while the process that trained its hop, which writes it
    behind its hand-on, is alive and has not said its write failed (``writer_alive``),
    however long a large checkpoint takes on a slow store.
    """
    key = checkpoint_key(study.id, trial.id, epoch, position)
    checkpoint = kept
    if checkpoint is None:
        records = HopRecords(rt.db)
        checkpoint = load_checkpoint(
            rt.store, key, rt.device, wait=liveness_seconds(),
            writing=lambda: records.writer_alive(trial.id, epoch, position, live_after(),
                                                 me=rt.holder))
    model = bare_trial_model(region, trial.params, meta)
    model.load_state_dict(checkpoint.model, assign=True)
    if any(t.is_meta for t in (*model.parameters(), *model.buffers())):
        # a tensor the state_dict does not carry (a non-persistent buffer): build for real
        model = build_trial_model(region, trial.params, trial.seed, meta, rt.device)
        model.load_state_dict(checkpoint.model)
    return model, checkpoint


def run_hop(rt: Runtime, trial_id: int, epoch: int, position: int,
            on_progress: Callable[[HopReport], None] | None = None, *,
            message: HopMessage | None = None, again: bool = True) -> HopReport:
    """Run one delivery of hop (trial, epoch, position) on this worker.

    With ``message`` (the hop message that named it), the hop is first checked
    against what the study database records and the shards this worker owns
    (``_admission``): one that fails is set aside (``report.set_aside``) and
    trains nothing. ``again`` says the message came before (a broker's
    redelivery, a retry; where the caller cannot tell, as the inline runner, it
    may have): only then does a delivery that finds its hop done send the next
    hop again. The hop is claimed (one atomic step in the study database): a
    delivery that finds a live holder, or the hop done, trains nothing. A
    failure is recorded on the hop: a transient one is raised for the task to
    retry, one that repeats (or a model that cannot be built) fails the trial
    with its reason, any other is retried once (``report.retry``). An input
    checkpoint that cannot be read is set aside and the hop that wrote it runs again.
    """
    admitted: Admitted | None = None
    if message is not None:  # its checks read in one transaction
        found = admission(rt, message.region, message.study, message.shard, trial_id, epoch,
                          position)
        if isinstance(found, str):
            return set_aside_report(HopReport(trial_id, epoch, position, message.shard), found)
        admitted = found
    claimed = claim(rt, trial_id, epoch, position, None if message is None else message.shard,
                    admitted=admitted, again=again)
    if isinstance(claimed, HopReport):
        return claimed
    return finish(rt, claimed, on_progress)


def set_aside_report(report: HopReport, reason: str) -> HopReport:
    """``report`` of a delivery whose message no worker may act on, for ``reason``."""
    report.set_aside, report.skipped = reason, f"set aside: {reason}"
    return report


def claim(rt: Runtime, trial_id: int, epoch: int, position: int, shard: int | None = None, *,
          study: StudyRow | None = None, admitted: Admitted | None = None, again: bool = True
          ) -> Claimed | HopReport:
    """Claim hop (trial, epoch, position) for this worker, or the final report of a delivery
    that may not train it. ``shard`` and ``study`` are the message's, where it named them
    (``study`` checked already): a hop the database does not record so, on another shard
    or of another study, is set aside (``admit``), unless it was ``admitted`` already.
    ``again`` is ``run_hop``'s."""
    db = rt.db
    report = HopReport(trial_id, epoch, position, -1 if shard is None else shard)
    if admitted is None:
        found = admit(rt, trial_id, epoch, position, study=study, shard=shard)
        if isinstance(found, str):
            return set_aside_report(report, found)
        admitted = found
    study, trial, record = admitted
    report.shard = record.visit_order[position]
    if trial.state not in ACTIVE_STATES:
        report.skipped = f"trial is {trial.state}"
        return report
    region = region_of(study)
    outcome, hop, previous = HopRecords(db).claim(trial_id, epoch, position, report.shard,
                                                  worker=rt.worker, holder=rt.holder,
                                                  live_after=live_after())
    if outcome == "held":
        report.skipped = f"held by {hop.worker}, which is alive"
        log.info("hop %s: %s", hop.id, report.skipped)
        return report
    if outcome == "claimed" and hop.interrupted > region.max_redeliveries:
        reason = (f"hop epoch {epoch} position {position} (shard {report.shard}) was "
                  f"interrupted {hop.interrupted} times "
                  f"(max_redeliveries={region.max_redeliveries}); "
                  f"last on worker {previous}")
        return _fail_trial(rt, study, trial, report, reason)
    return Claimed(region, study, trial, record, report, outcome, hop, again=again)


#: How a claimed hop trains: (runtime, claimed, manifest, checkpoint key) -> its model.
Train = Callable[[Runtime, Claimed, dict[str, Any], str], torch.nn.Module]


def finish(rt: Runtime, c: Claimed, on_progress: Callable[[HopReport], None] | None = None,
           train: Train | None = None) -> HopReport:
    """The rest of a claimed delivery: train (``train``, default one hop alone), record, hand
    on. Whatever escapes gives the hop back, so it never stays held by a live worker."""
    try:
        return _after_claim(rt, c, on_progress, train or train_alone)
    except BaseException:
        if c.claim == "claimed":
            release(rt, c)
        raise


def release(rt: Runtime, c: Claimed) -> None:
    """Give a claimed hop back to the queue (best effort: the sweeper frees it otherwise)."""
    try:
        HopRecords(rt.db).release(c.trial.id, c.report.epoch, c.report.position,
                                  holder=rt.holder)
    except Exception:  # noqa: BLE001 - the sweeper frees it once this worker is gone
        log.warning("hop %d: could not give it back", c.hop.id, exc_info=True)


def _after_claim(rt: Runtime, c: Claimed, on_progress: Callable[[HopReport], None] | None,
                 train: Train) -> HopReport:
    """The rest of a delivery once its claim is decided: train, record, hand on."""
    db, store = rt.db, rt.store
    region, study, trial, record, report, claim, hop = (
        c.region, c.study, c.trial, c.record, c.report, c.claim, c.hop)
    trial_id, epoch, position, shard = trial.id, report.epoch, report.position, report.shard
    order = record.visit_order
    key = checkpoint_key(study.id, trial_id, epoch, position)
    manifest = study_manifest(rt, study)
    model: torch.nn.Module | None = None
    if claim == "done":
        report.skipped = "output checkpoint exists"
        report.samples, report.loss = hop.samples, hop.loss
        if c.again:
            report.dispatch.extend(_hand_on_again(rt, region, study, record, position))
        if position + 1 == len(order) and record.finished_at is None:
            # the epoch is undecided (its decider died, or decides now): validate its weights
            try:
                model, _ = model_at(rt, region, study, trial, epoch, position, manifest["meta"])
            except CheckpointError as exc:  # this hop's own output: it runs again
                return rewind(rt, region, study, trial, report, exc, at=(epoch, position))
            report.epoch_end = EpochEnd(region, study, trial, epoch, model, manifest)
        return report
    done = None if c.in_pass else readable(store, key)
    if done is not None:  # trained and saved, but its worker died before recording it
        report.skipped = "output checkpoint exists"
        report.samples, report.loss = done.samples, done.loss
    else:
        try:
            model = train(rt, c, manifest, key)
        except CheckpointError as exc:
            return rewind(rt, region, study, trial, report, exc)
        except TRANSIENT:
            HopRecords(db).release(trial_id, epoch, position, holder=rt.holder)
            raise
        except BuildFailed as exc:
            HopRecords(db).release(trial_id, epoch, position, holder=rt.holder, error=exc.reason)
            return _fail_trial(rt, study, trial, report, f"model could not be built: "
                                                         f"{exc.reason}")
        except Exception as exc:  # noqa: BLE001 - any failure is recorded, never lost
            log.exception("hop %d of trial %d failed", hop.id, trial_id)
            reason = describe(exc)
            HopRecords(db).release(trial_id, epoch, position, holder=rt.holder, error=reason)
            if hop.error == reason:  # the same failure on a second delivery: for good
                return _fail_trial(rt, study, trial, report,
                                   f"hop epoch {epoch} position {position} (shard {shard}) "
                                   f"failed twice on {rt.worker}: {reason}")
            report.skipped, report.retry = f"failed, tried again: {reason}", True
            return report
    if on_progress is not None:
        try:
            on_progress(report)
        except Exception:  # noqa: BLE001 - an event the broker could not take costs no hop
            log.warning("hop %d: its progress event was not sent", hop.id, exc_info=True)

    last = position + 1 == len(order)
    figures = {"samples": report.samples, "loss": report.loss}
    if report.trained:
        figures.update(train_seconds=report.train_seconds, load_seconds=report.load_seconds,
                       save_seconds=report.save_seconds)
    queued = HopRecords(db).hand_on(trial_id, epoch, position, region=region.name,
                                    shards=len(order), live_after=live_after(), place=c.place,
                                    **figures)
    if report.written is not None and report.written.done():  # failed before its hop was done:
        # said now (the callback found it running)
        _say_if_failed(rt, trial_id, epoch, position, report.written)
    if report.trained:
        log.info("trained hop: trial %d epoch %d position %d shard %d on %s", trial_id, epoch,
                 position, shard, rt.holder)
    if report.written is None:  # else the writer drops them once the new one is written
        _drop_old_checkpoints(store, study.id, trial_id, epoch, position, region.shards)
    if not last:
        if queued is not None:
            report.dispatch.append(
                hop_dispatch(region.name, study.id, trial_id, epoch, position + 1, queued))
        return report
    report.epoch_end = EpochEnd(region, study, trial, epoch, model, manifest, report.written)
    return report


class BuildFailed(Exception):
    """The family could not build the trial's model: its params and seed fail every time."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def restore(rt: Runtime, c: Claimed, manifest: dict[str, Any]
            ) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    """The model and optimizer hop ``c`` starts from; BuildFailed when the family cannot build
    it (its params and seed fail every time)."""
    try:
        return restore_trial(rt, c.region, c.study, c.trial, c.report.epoch, c.report.position,
                             manifest["meta"])
    except (CheckpointError, *TRANSIENT):
        raise
    except Exception as exc:  # noqa: BLE001 - the user's model factory may raise anything
        log.exception("trial %d: building its model failed", c.trial.id)
        raise BuildFailed(describe(exc)) from exc


def train_alone(rt: Runtime, c: Claimed, manifest: dict[str, Any], key: str
                ) -> torch.nn.Module:
    """Train claimed hop ``c`` by itself (the single hop's ``Train``) and save its output."""
    report = c.report
    started = time.perf_counter()
    model, optimizer = restore(rt, c, manifest)
    data = rt.shard(manifest, report.shard)
    report.load_seconds = time.perf_counter() - started
    trained = train_pass(c.region, model, optimizer, data, seed=c.trial.seed,
                         epoch=report.epoch, shard=report.shard, position=report.position,
                         params=c.trial.params)
    save(rt, c, key, model, optimizer, trained, train_on=True)
    return model


def save(rt: Runtime, c: Claimed, key: str, model: torch.nn.Module,
         optimizer: torch.optim.Optimizer, trained: TrainedPass, *, train_on: bool = False
         ) -> None:
    """Write the trained hop's checkpoint (and keep it in memory) and fill in its report.

    The hop leaves its checkpoint's layout, checksum and write to the process's
    writer (``report.written``), behind its hand-on: the successor's reader waits
    for it, and after an epoch's last hop the epoch's end validates the weights in
    memory meanwhile (reading them, as the writer does) and waits for the write
    before it decides (what it decides may keep the file as the trial's final or
    best weights). The next hop to train these tensors in this process takes them
    from ``rt.latest``, which waits for the write too; with ``train_on``, as this
    ``model`` and ``optimizer`` (a single hop's: a cohort member's optimizer state is
    cut from the cohort's, laid out as no hop of its own would).
    """
    report = c.report
    report.trained = True
    rt.hops_trained += 1
    report.samples, report.loss, report.train_seconds = (
        trained.samples, trained.loss, trained.seconds)
    started = time.perf_counter()
    checkpoint = Checkpoint(model=model.state_dict(), optimizer=optimizer.state_dict(),
                            samples=trained.samples, loss=trained.loss)
    # what the write and its callback keep is plain values: the future, kept with the
    # checkpoint, must not hold the hop (its report holds the future, and the epoch's end
    # the model): such a cycle would keep the hop's tensors until the cyclic collector ran,
    # so the next hop's read would fault fresh memory in instead of reusing theirs
    study_id, trial_id, shards = c.study.id, c.trial.id, c.region.shards
    epoch, position = report.epoch, report.position
    report.written = rt.writer.save(rt.store, key, checkpoint, then=lambda: _drop_old_checkpoints(
        rt.store, study_id, trial_id, epoch, position, shards))
    report.written.add_done_callback(
        lambda written: _say_if_failed(rt, trial_id, epoch, position, written))
    if train_on:  # kept to train on, without its last step's gradients (each step makes its own)
        for p in model.parameters():
            p.grad = None
    rt.latest.keep(c.trial.id, key, None, checkpoint, report.written,
                   (model, optimizer) if train_on else None)
    report.save_seconds = time.perf_counter() - started


def _say_if_failed(rt: Runtime, trial_id: int, epoch: int, position: int,
                   written: Future[Any]) -> None:
    """A checkpoint written behind whose write failed: said on its hop's row, so its reader
    (waiting while this process is alive) runs the hop again at once."""
    exc = written.exception()
    if exc is None:
        return
    try:
        HopRecords(rt.db).write_failed(trial_id, epoch, position, holder=rt.holder,
                                       reason=f"its checkpoint's write failed: {describe(exc)}")
    except Exception:  # noqa: BLE001 - its reader waits for it as for a hanging write
        log.warning("hop of trial %d: its failed write could not be recorded", trial_id,
                    exc_info=True)


def wait_written(*reports: HopReport) -> None:
    """Return once the checkpoints these hops write behind are written (or failed: logged)."""
    for report in reports:
        if report.written is not None:
            try:
                report.written.result()
            except Exception:  # noqa: BLE001 - logged by the writer; its reader rewinds
                pass


def readable(store: Any, key: str) -> Checkpoint | None:
    """The checkpoint under ``key`` if it exists and reads whole; a damaged one is set aside."""
    if not store.exists(key):
        return None
    try:
        return load_checkpoint(store, key)
    except CheckpointError as exc:
        log.warning("%s: set aside as %s; training the hop again", exc,
                    set_aside(store, key, utcnow().strftime("%Y%m%dT%H%M%S")))
        return None


def _fail_trial(rt: Runtime, study: StudyRow, trial: TrialRow, report: HopReport,
                reason: str) -> HopReport:
    """End the trial as failed with ``reason``; its slot goes to the next proposal."""
    if rt.db.end_trial(trial.id, "failed", failure=reason):
        keep_final(rt.store, study.id, trial.id, None, region_of(study).shards)
    log.error("trial %d failed: %s", trial.id, reason)
    report.skipped = reason
    report.dispatch.extend(tune_step_after_end(rt.db, study))
    return report


def rewind(rt: Runtime, region: RegionConfig, study: StudyRow, trial: TrialRow,
           report: HopReport, exc: CheckpointError, at: tuple[int, int] | None = None
           ) -> HopReport:
    """A checkpoint is unreadable: set it aside and run the hop that wrote it again.

    That hop is the one before this delivery's (its input), or ``at``: a done
    last hop whose epoch was never decided reads its own output to validate.
    Each rewind counts toward ``max_redeliveries``; past it the trial fails,
    naming the file.
    """
    before = at or previous_position(report.epoch, report.position, region.shards)
    assert before is not None  # the very first hop reads no checkpoint
    aside = set_aside(rt.store, exc.key, utcnow().strftime("%Y%m%dT%H%M%S"))
    rewinds = HopRecords(rt.db).rewind(trial.id, *before, reason=str(exc))
    if rewinds is None:
        report.skipped = "trial is no longer running"
        return report
    if rewinds > region.max_redeliveries:
        return _fail_trial(rt, study, trial, report,
                           f"{exc} (set aside as {aside}; written {rewinds} times, "
                           f"max_redeliveries={region.max_redeliveries})")
    log.warning("%s: set aside as %s; running hop epoch %d position %d again", exc, aside,
                *before)
    shard = rt.db.epoch(trial.id, before[0]).visit_order[before[1]]
    report.dispatch.append(hop_dispatch(region.name, study.id, trial.id, *before, shard))
    report.skipped = f"{exc}: set aside, running hop epoch {before[0]} position {before[1]} again"
    return report


def _hand_on_again(rt: Runtime, region: RegionConfig, study: StudyRow, record: EpochRow,
                   position: int) -> list[Dispatch]:
    """A done hop delivered again hands on again while its successor still waits: the next
    hop of its epoch, or after the epoch's last hop (once the epoch is decided) the next
    epoch's first.

    Only for a message that came before (``Claimed.again``): its first delivery
    recorded the successor as queued and may have died before sending it. A copy
    (a duplicate, or the resend this sends) hands on nothing, so it costs one
    delivery and does not follow the trial down its chain.
    """
    trial_id, epoch = record.trial_id, record.epoch
    if position + 1 < len(record.visit_order):
        following = HopRecords(rt.db).get(trial_id, epoch, position + 1)
    elif record.finished_at is not None:
        following = HopRecords(rt.db).get(trial_id, epoch + 1, 0)
    else:
        return []
    if following is None or following.state != "queued":
        return []
    return [hop_dispatch(region.name, study.id, trial_id, following.epoch, following.position,
                         following.shard)]


def _drop_old_checkpoints(store: Any, study_id: int, trial_id: int, epoch: int, position: int,
                          shards: int) -> None:
    """Keep a running trial's two latest checkpoints: enough to resume and to rewind once.

    An epoch's end stays: the end of the epoch decides whether it is the best one
    (``select = "best"``) and removes it once it is not.
    """
    before = previous_position(epoch, position, shards)
    older = previous_position(*before, shards) if before is not None else None
    if older is not None and older[1] != shards - 1:
        store.delete(checkpoint_key(study_id, trial_id, *older))
