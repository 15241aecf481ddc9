"""Checkpoints: their checksum (and the older one), a worker's in-memory copy of a trial's latest
(used only while it is stored), and writes behind a hand-on that their reader waits for."""

from __future__ import annotations

import os
import threading
import time

import pytest
import torch

from hoptune.core import CheckpointError, Store
from hoptune.regions import ingest, load_config
from hoptune.tasks import checkpoint_key, create_study, load_checkpoint, replay_trial
from hoptune.tasks.study._inline import run_inline
from hoptune.tasks.study._workflow import tune_step
from hoptune.tasks.worker._checkpoint import (
    WRITE_CHUNK,
    WRITER_NICENESS,
    Checkpoint,
    CheckpointWriter,
    LatestCheckpoints,
    encode_checkpoint,
    poll_pause,
    save_checkpoint,
)
from hoptune.tuner import HopRecords


def _checkpoint(value: float) -> Checkpoint:
    return Checkpoint(model={"w": torch.full((3,), value)}, optimizer={}, samples=3, loss=value)


def test_a_kept_checkpoint_is_taken_once_while_the_store_holds_the_same(tmp_path) -> None:
    store = Store(str(tmp_path))
    latest = LatestCheckpoints(limit=2)
    first = _checkpoint(1.0)
    latest.keep(7, "a.pt", save_checkpoint(store, "a.pt", first), first)
    assert latest.take(store, 7, "b.pt") is None  # another hop's checkpoint: not this one
    latest.keep(7, "a.pt", save_checkpoint(store, "a.pt", first), first)
    assert latest.take(store, 7, "a.pt") is first
    assert latest.take(store, 7, "a.pt") is None  # handed out once: its tensors train on
    assert (latest.hits, latest.misses) == (1, 2)


def test_a_copy_the_store_no_longer_holds_is_never_used(tmp_path) -> None:
    store = Store(str(tmp_path))
    latest = LatestCheckpoints(limit=2)
    mine = _checkpoint(1.0)
    latest.keep(7, "a.pt", save_checkpoint(store, "a.pt", mine), mine)
    save_checkpoint(store, "a.pt", _checkpoint(2.0))  # the hop ran again elsewhere
    assert latest.take(store, 7, "a.pt") is None
    latest.keep(7, "a.pt", save_checkpoint(store, "a.pt", mine), mine)
    store.delete("a.pt")  # set aside as unreadable
    assert latest.take(store, 7, "a.pt") is None


def test_the_memory_is_bounded_and_can_be_off(tmp_path) -> None:
    store = Store(str(tmp_path))
    latest = LatestCheckpoints(limit=1)
    for trial in (1, 2):
        c = _checkpoint(float(trial))
        latest.keep(trial, f"{trial}.pt", save_checkpoint(store, f"{trial}.pt", c), c)
    assert latest.take(store, 1, "1.pt") is None and latest.take(store, 2, "2.pt") is not None
    off = LatestCheckpoints(limit=0)
    c = _checkpoint(1.0)
    off.keep(1, "1.pt", save_checkpoint(store, "1.pt", c), c)
    assert off.take(store, 1, "1.pt") is None


def test_a_kept_checkpoint_hands_out_what_owns_its_tensors_with_it(tmp_path) -> None:
    store = Store(str(tmp_path))
    latest, mine, owners = LatestCheckpoints(limit=2), _checkpoint(1.0), ("model", "optimizer")
    latest.keep(7, "a.pt", save_checkpoint(store, "a.pt", mine), mine, None, owners)
    assert latest.take_trained(store, 7, "a.pt") == (mine, owners)
    latest.keep(7, "a.pt", save_checkpoint(store, "a.pt", mine), mine)
    assert latest.take_trained(store, 7, "a.pt") == (mine, None)
    latest.keep(7, "a.pt", save_checkpoint(store, "a.pt", mine), mine, None, owners)
    save_checkpoint(store, "a.pt", _checkpoint(2.0))  # the store holds another: neither
    assert latest.take_trained(store, 7, "a.pt") is None


@pytest.mark.integration
def test_hops_from_memory_give_bitwise_the_weights_of_hops_from_the_store(make_config, rt,
                                                                          monkeypatch) -> None:
    from hoptune.tasks.hop import _hop

    region = load_config(make_config(shards=2, epochs=2)).region("north")
    manifest = ingest(region, Store(rt.settings.store_url)).manifest
    torch.set_num_threads(1)
    built, bare = [], _hop.bare_trial_model
    monkeypatch.setattr(_hop, "bare_trial_model", lambda *a: built.append(a) or bare(*a))
    finals = []
    for limit in (16, 0):
        rt.latest = LatestCheckpoints(limit=limit)
        built.clear()
        study = create_study(rt, region, manifest=manifest, configs=[{"lr": 0.03}])
        run_inline(rt, tune_step(rt, study))
        (trial,) = rt.db.trials(study)
        assert trial.state == "done"
        # one process: every hop but the first found its input in memory, or none did;
        # from memory it trained on the model that wrote it, built none
        assert rt.latest.hits == (3 if limit else 0)
        assert len(built) == (0 if limit else 3)
        if limit:  # the last hop's model is kept to train on, its gradients not
            kept = rt.latest.take_trained(rt.store, trial.id,
                                          checkpoint_key(study, trial.id, 1, 1))
            assert kept is not None and kept[1] is not None
            assert all(p.grad is None for p in kept[1][0].parameters())
        finals.append(load_checkpoint(rt.store, checkpoint_key(study, trial.id, 1, 1)).model)
        replayed = replay_trial(rt, trial.id)
        for name, tensor in finals[-1].items():
            assert torch.equal(tensor, replayed[name]), name
    for name in finals[0]:
        assert torch.equal(finals[0][name], finals[1][name]), name


def test_a_checkpoint_written_with_a_sha256_trailer_still_reads(tmp_path) -> None:
    import hashlib
    import io

    store = Store(str(tmp_path))
    buffer = io.BytesIO()
    torch.save({"model": {"w": torch.arange(4.0)}, "optimizer": {}, "samples": 4, "loss": 0.5},
               buffer)
    body = buffer.getvalue()
    store.write_bytes("old.pt", body + b"HTCK" + hashlib.sha256(body).digest())
    assert torch.equal(load_checkpoint(store, "old.pt").model["w"], torch.arange(4.0))
    store.write_bytes("bad.pt", body[:-1] + bytes([body[-1] ^ 1]) + b"HTCK"
                      + hashlib.sha256(body).digest())
    with pytest.raises(CheckpointError, match="checksum"):
        load_checkpoint(store, "bad.pt")


def test_one_flipped_byte_anywhere_is_found(tmp_path) -> None:
    store = Store(str(tmp_path))
    save_checkpoint(store, "a.pt", _checkpoint(1.0))
    data = store.read_bytes("a.pt")
    for at in (0, len(data) // 2, len(data) - 30):
        spoilt = bytearray(data)
        spoilt[at] ^= 0x10
        store.write_bytes("a.pt", bytes(spoilt))
        with pytest.raises(CheckpointError, match="checksum"):
            load_checkpoint(store, "a.pt")


def test_a_reader_waits_for_a_checkpoint_written_behind_and_gives_up_after_its_bound(
        tmp_path) -> None:
    store = Store(str(tmp_path))
    writer = CheckpointWriter()
    data, digest = encode_checkpoint(_checkpoint(3.0))
    later = threading.Timer(0.3, lambda: writer.write(store, "a.pt", data))
    later.start()
    assert load_checkpoint(store, "a.pt", wait=30).loss == 3.0  # waited, then read it whole
    later.join()
    started = time.monotonic()
    with pytest.raises(CheckpointError, match="does not exist"):
        load_checkpoint(store, "never.pt", wait=0.3)
    assert time.monotonic() - started >= 0.3


def test_a_reader_waits_past_its_bound_while_the_writer_still_writes_and_stops_when_it_cannot(
        tmp_path) -> None:
    """A large checkpoint on a slow store takes longer to write than the liveness bound: its
    reader waits while the writer says it still writes, and stops at once when it says
    the write will not come (its writer died, or its write failed)."""
    store = Store(str(tmp_path))
    writer = CheckpointWriter()
    data, _ = encode_checkpoint(_checkpoint(4.0))
    asked: list[float] = []

    def writing() -> bool:
        asked.append(time.monotonic())
        return True

    later = threading.Timer(1.5, lambda: writer.write(store, "slow.pt", data))
    later.start()
    # the bound alone (0.2 s) gives up long before the write lands; the live writer does not
    assert load_checkpoint(store, "slow.pt", wait=0.2, writing=writing).loss == 4.0
    later.join()
    assert len(asked) >= 2  # asked again and again while it waited
    stopped: list[float] = []
    later = threading.Timer(3.0, lambda: writer.write(store, "failed.pt", data))
    later.start()
    with pytest.raises(CheckpointError, match="does not exist"):
        load_checkpoint(store, "failed.pt", wait=30,
                        writing=lambda: stopped.append(time.monotonic()) or False)
    assert len(stopped) == 1 and not store.exists("failed.pt")  # gave up at the first answer
    later.join()
    # an answer that does not know keeps the bound as it was
    with pytest.raises(CheckpointError, match="does not exist"):
        load_checkpoint(store, "never.pt", wait=0.7, writing=lambda: None)


def test_a_hung_write_of_a_live_writer_is_waited_for_a_bounded_time(tmp_path,
                                                                     monkeypatch) -> None:
    from hoptune.tasks.worker import _checkpoint as module

    monkeypatch.setattr(module, "WRITE_WAIT_LIVENESSES", 4)
    monkeypatch.setattr(module, "WRITER_POLL_SECONDS", 0.05)
    asked: list[float] = []
    started = time.monotonic()
    with pytest.raises(CheckpointError, match="does not exist"):
        load_checkpoint(Store(str(tmp_path)), "hung.pt", wait=0.2,
                        writing=lambda: asked.append(time.monotonic()) or True)
    assert time.monotonic() - started >= 0.8  # four bounds, not one
    assert asked[-1] - started >= 0.6


def test_a_kept_checkpoint_written_behind_is_taken_once_its_write_landed(tmp_path) -> None:
    store = Store(str(tmp_path))
    latest, writer = LatestCheckpoints(limit=2), CheckpointWriter()
    mine = _checkpoint(1.0)
    data, digest = encode_checkpoint(mine)
    gate = threading.Event()
    writer.write(store, "slow.pt", encode_checkpoint(_checkpoint(0.0))[0], then=gate.wait)
    written = writer.write(store, "a.pt", data)  # queued behind the one that waits
    latest.keep(7, "a.pt", digest, mine, written)
    threading.Timer(0.2, gate.set).start()
    assert latest.take(store, 7, "a.pt") is mine  # waited for its write, then compared
    assert written.done()


def _spy_encodes(monkeypatch) -> list[int]:
    """The threads ``encode_checkpoint`` runs on, from here on."""
    from hoptune.tasks.worker import _checkpoint as module

    threads: list[int] = []
    real = module.encode_checkpoint

    def spy(checkpoint: Checkpoint):
        threads.append(threading.get_ident())
        return real(checkpoint)

    monkeypatch.setattr(module, "encode_checkpoint", spy)
    return threads


def test_a_checkpoint_saved_behind_is_laid_out_and_summed_on_the_writer_thread(
        tmp_path, monkeypatch) -> None:
    """``CheckpointWriter.save``: a checkpoint in host memory is encoded off the caller's
    thread; its future gives the digest ``encode_checkpoint`` gives, the kept copy is taken
    once that write landed, and the stored bytes read back bitwise."""
    threads = _spy_encodes(monkeypatch)
    store, writer, latest = Store(str(tmp_path)), CheckpointWriter(), LatestCheckpoints(limit=2)
    weights = torch.randn(1000, generator=torch.Generator().manual_seed(0))
    mine = Checkpoint(model={"w": weights}, optimizer={"state": {0: {"m": weights[:10] * 2}}},
                      samples=5, loss=0.25)
    written = writer.save(store, "a.pt", mine)
    latest.keep(7, "a.pt", None, mine, written)
    assert latest.take(store, 7, "a.pt") is mine
    assert threads and threading.get_ident() not in threads
    assert written.result() == encode_checkpoint(mine)[1]
    back = load_checkpoint(store, "a.pt")
    assert torch.equal(back.model["w"], weights) and back.loss == 0.25
    assert torch.equal(back.optimizer["state"][0]["m"], weights[:10] * 2)


def test_a_checkpoint_that_cannot_be_encoded_behind_is_a_failed_write(
        tmp_path, monkeypatch, caplog) -> None:
    """Its future raises, nothing is stored, the kept copy is never taken (its reader finds
    the checkpoint missing and rewinds, as after a failed write), and the log says why."""
    from hoptune.tasks.worker import _checkpoint as module

    def broken(checkpoint: Checkpoint):
        raise RuntimeError("no room")

    monkeypatch.setattr(module, "encode_checkpoint", broken)
    store, writer, latest = Store(str(tmp_path)), CheckpointWriter(), LatestCheckpoints(limit=2)
    mine = _checkpoint(1.0)
    written = writer.save(store, "a.pt", mine)
    latest.keep(7, "a.pt", None, mine, written)
    assert latest.take(store, 7, "a.pt") is None
    with pytest.raises(RuntimeError, match="no room"):
        written.result()
    assert not store.exists("a.pt")
    assert "checkpoint a.pt could not be encoded" in caplog.text


@pytest.mark.skipif(not hasattr(os, "getpriority"), reason="POSIX nice levels")
def test_the_writer_thread_yields_to_the_hand_on_it_is_behind(tmp_path) -> None:
    """The writer thread runs at nice 10 (Linux: per thread), the hand-on's own thread at its
    own level."""
    seen: dict[str, int] = {}

    def nice() -> None:
        seen["nice"] = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    store = Store(str(tmp_path))
    own = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    CheckpointWriter().write(store, "a.pt", encode_checkpoint(_checkpoint(1.0))[0],
                             then=nice).result()
    assert seen["nice"] == (WRITER_NICENESS if own <= WRITER_NICENESS else own)
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == own


def test_a_checkpoint_of_several_write_chunks_reads_back_bitwise(tmp_path) -> None:
    """Written a ``WRITE_CHUNK`` per call: the bytes of every chunk, the last partial one
    too, land in order."""
    store = Store(str(tmp_path))
    weights = torch.randn(WRITE_CHUNK // 2 + 12_345, generator=torch.Generator().manual_seed(0))
    data, _ = encode_checkpoint(Checkpoint(model={"w": weights}, optimizer={}, samples=1,
                                           loss=0.5))
    assert 2 * WRITE_CHUNK < len(data) < 3 * WRITE_CHUNK
    CheckpointWriter().write(store, "big.pt", data).result()
    assert torch.equal(load_checkpoint(store, "big.pt").model["w"], weights)


def test_a_forked_child_writes_behind_with_a_thread_of_its_own(tmp_path) -> None:
    """A pool worker forked from a process that already wrote behind would otherwise hand its
    writes to a thread that does not exist in it, and wait for them forever."""
    store, writer = Store(str(tmp_path)), CheckpointWriter()
    writer.write(store, "parent.pt", encode_checkpoint(_checkpoint(1.0))[0]).result()
    pid = os.fork()
    if pid == 0:  # the child: exit 0 only once its own write landed
        done = writer.write(store, "child.pt", encode_checkpoint(_checkpoint(2.0))[0])
        try:
            done.result(timeout=20)
            os._exit(0)
        except BaseException:  # noqa: BLE001 - any failure is the child's exit status
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert load_checkpoint(store, "child.pt").loss == 2.0


def _one_trial_whose_write_fails_once(make_config, rt, monkeypatch, position: int  # noqa: ANN001
                                      ) -> tuple[int, str, list[str]]:
    """A study of one trial over 2 shards for 2 epochs, whose first epoch's hop at
    ``position`` fails to write its checkpoint once: (study, that key, the failed writes)."""
    from hoptune.tasks.worker import _checkpoint

    region = load_config(make_config(shards=2, epochs=2)).region("north")
    manifest = ingest(region, Store(rt.settings.store_url)).manifest
    study = create_study(rt, region, manifest=manifest, configs=[{"lr": 0.03}])
    key = checkpoint_key(study, 1, 0, position)
    write, failed = _checkpoint.write_encoded, []

    def failing_once(store, at, data):  # noqa: ANN001, ANN202
        if at == key and not failed:
            failed.append(at)
            raise OSError("No space left on device")
        write(store, at, data)

    monkeypatch.setattr(_checkpoint, "write_encoded", failing_once)
    return study, key, failed


def test_an_epochs_last_hop_whose_write_behind_fails_runs_again_before_the_epoch_is_decided(
        make_config, rt, monkeypatch) -> None:
    # the first epoch's last hop (the study's one trial)
    study, last, failed = _one_trial_whose_write_fails_once(make_config, rt, monkeypatch, 1)
    run_inline(rt, tune_step(rt, study))
    (trial,) = rt.db.trials(study)
    assert failed == [last] and trial.state == "done"
    hop = HopRecords(rt.db).get(trial.id, 0, 1)
    assert hop.errors == 1 and "its write failed: OSError: No space left" in hop.error
    assert [e.epoch for e in rt.db.epochs(trial.id) if e.finished_at] == [0, 1]
    replayed = replay_trial(rt, trial.id)  # the hop run again changed nothing
    final = load_checkpoint(rt.store, checkpoint_key(study, trial.id, 1, 1)).model
    for name, tensor in final.items():
        assert torch.equal(tensor, replayed[name]), name


def test_a_hop_whose_write_behind_fails_is_said_so_and_its_reader_runs_it_again_at_once(
        make_config, rt, monkeypatch) -> None:
    """The writer of a checkpoint that could not be written is alive, so its reader would wait
    for it as for a slow write; the failure said on the hop's row stops that wait: the hop
    runs again, once, and the trial ends as its replay."""
    monkeypatch.setenv("HOPTUNE_LIVENESS_SECONDS", "5")  # a live writer's: up to 50 s
    # the first hop, read by the epoch's next
    study, first, failed = _one_trial_whose_write_fails_once(make_config, rt, monkeypatch, 0)
    answers: list[bool] = []
    alive = HopRecords.writer_alive

    def asked(self, *args, **kw):  # noqa: ANN001, ANN002, ANN003, ANN202
        answers.append(alive(self, *args, **kw))
        return answers[-1]

    monkeypatch.setattr(HopRecords, "writer_alive", asked)
    run_inline(rt, tune_step(rt, study))
    (trial,) = rt.db.trials(study)
    assert failed == [first] and trial.state == "done"
    assert answers == [False]  # the reader was told at once that the write will not come
    hop = HopRecords(rt.db).get(trial.id, 0, 0)
    assert hop.errors == 1 and "does not exist" in hop.error, hop  # ran again, once
    replayed = replay_trial(rt, trial.id)
    final = load_checkpoint(rt.store, checkpoint_key(study, trial.id, 1, 1)).model
    for name, tensor in final.items():
        assert torch.equal(tensor, replayed[name]), name


def test_a_copy_of_an_epochs_last_hop_waits_for_the_weights_written_behind_it(
        make_config, rt, monkeypatch) -> None:
    """A second delivery of an epoch's last hop that finds it done and the epoch undecided
    validates its weights: while the first delivery still writes them behind its hand-on,
    the copy waits for them instead of running the hop again (seen under load in CI: a hop
    trained twice)."""
    from hoptune.tasks.hop import run_hop
    from hoptune.tasks.worker import _checkpoint

    region = load_config(make_config(shards=2, epochs=1)).region("north")
    manifest = ingest(region, Store(rt.settings.store_url)).manifest
    study = create_study(rt, region, manifest=manifest, configs=[{"lr": 0.03}])
    last = checkpoint_key(study, 1, 0, 1)  # the only epoch's last hop
    write, copies = _checkpoint.write_encoded, []

    def late(store, key, data):
        if key == last and not copies:  # the copy arrives while the write is under way
            # and once the hop is recorded done (the write behind does not wait for that):
            # a copy claiming it before (the same holder, here) would train it as its own
            recorded = time.monotonic() + 30
            while HopRecords(rt.db).get(1, 0, 1).state != "done" and time.monotonic() < recorded:
                time.sleep(0.01)
            copy = threading.Thread(target=lambda: copies.append(run_hop(rt, 1, 0, 1)))
            copies.append(copy)
            copy.start()
            time.sleep(0.5)
        write(store, key, data)

    monkeypatch.setattr(_checkpoint, "write_encoded", late)
    run_inline(rt, tune_step(rt, study))
    copies[0].join(30)
    report = copies[1]
    assert report.skipped == "output checkpoint exists" and report.epoch_end is not None
    hop = HopRecords(rt.db).get(1, 0, 1)
    assert hop.state == "done" and hop.errors == 0, hop
    assert rt.db.trials(study)[0].state == "done"


def test_a_checkpoint_written_behind_holds_no_cycle_that_keeps_its_hops_tensors(make_config,
                                                                                rt) -> None:
    """The future of a write behind, which a worker keeps with the checkpoint, holds plain
    values and not the hop: a cycle through the hop's report (which holds the future, and at
    an epoch's end the model) would keep the hop's tensors until the cyclic collector ran,
    and the next hop's read would fault fresh memory in instead of reusing theirs."""
    import gc
    import weakref

    from hoptune.tasks import run_hop
    from hoptune.tasks.hop import wait_written

    region = load_config(make_config(shards=1, epochs=1)).region("north")
    manifest = ingest(region, Store(rt.settings.store_url)).manifest
    rt.latest = LatestCheckpoints(limit=0)  # nothing kept to train on: the model may go
    study = create_study(rt, region, manifest=manifest, configs=[{"lr": 0.03}, {"lr": 0.01}])
    warm, first = tune_step(rt, study)
    wait_written(run_hop(rt, warm.kwargs["trial"], 0, 0))  # what a process does once, done
    gc.collect()
    gc.disable()
    try:
        report = run_hop(rt, first.kwargs["trial"], 0, 0)
        wait_written(report)
        written, model = report.written, weakref.ref(report.epoch_end.model)
        assert written is not None and written.done() and model() is not None
        del report
        assert model() is None  # gone with its last reference, not left to the collector
    finally:
        gc.enable()


def test_a_reader_looks_again_after_at_most_a_tenth_of_its_wait_so_far() -> None:
    """A checkpoint written behind lands within milliseconds: the reader waiting for it sees it
    at most a tenth of its wait late (pauses that doubled each time saw it up to as late again
    as it had waited), never pausing past its deadline."""
    assert poll_pause(0.0, 5.0) == 0.001  # the first looks come a millisecond apart
    assert poll_pause(0.004, 5.0) == 0.001
    assert poll_pause(0.05, 5.0) == pytest.approx(0.005)
    assert poll_pause(0.3, 5.0) == pytest.approx(0.03)
    assert poll_pause(30.0, 60.0) == 0.1  # a long wait: a store asked ten times a second
    assert poll_pause(0.5, 0.01) == 0.01  # never past the deadline
    waited, looks = 0.0, 0
    while waited < 1.0:  # the looks of a one-second wait: fewer than a hundred
        waited += poll_pause(waited, 1.0 - waited)
        looks += 1
    assert looks < 100
