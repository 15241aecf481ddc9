"""`hoptune doctor`: the host's checks, as a user runs them, and their parts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from hoptune import kernels
from hoptune.core import Settings
from hoptune.kernels import _specs
from hoptune.kernels._selftest import SelfTestResult
from hoptune.tasks.monitor import _doctor

SECTIONS = {"versions", "devices", "kernels", "determinism", "broker", "database", "store", "ok"}


def doctor(home: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {**os.environ, **env}
    return subprocess.run([sys.executable, "-m", "hoptune.tasks.cli", "doctor", *args],
                          cwd=home, env=environ, text=True, capture_output=True, timeout=120)


def test_doctor_json_with_a_broker_that_does_not_answer(home: Path) -> None:
    done = doctor(home, "--json", HOPTUNE_BROKER_URL="redis://:secret@127.0.0.1:1/0",
                  HOPTUNE_DATABASE_URL="postgresql://hop:pg-secret@127.0.0.1:1/studies")
    assert done.returncode == 1, done.stderr
    assert "secret" not in done.stdout + done.stderr
    (line,) = done.stdout.splitlines()
    report = json.loads(line)
    assert set(report) == SECTIONS and report["ok"] is False
    assert report["broker"] == {**report["broker"], "ok": False, "answers": False,
                                "url": "redis://:***@127.0.0.1:1/0"}
    assert report["database"]["url"] == "postgresql://hop:***@127.0.0.1:1/studies"
    assert report["database"]["ok"] is False
    versions = report["versions"]
    assert versions["torch"] == torch.__version__ and versions["python"]
    for key in ("torch_cuda", "cupy", "cupy_cuda", "celery", "kombu", "redis_py"):
        assert key in versions
    assert report["store"]["ok"] is True and report["store"]["free_gib"] > 0


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA device")
def test_doctor_on_this_cpu_machine_says_there_is_no_gpu_and_passes(home: Path,
                                                                    redis_url: str) -> None:
    done = doctor(home, "--json", HOPTUNE_BROKER_URL=redis_url)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["ok"] is True
    assert report["devices"]["count"] == 0
    assert "no CUDA device is visible" in report["devices"]["note"]
    assert report["kernels"] == {"ok": True, "results": [], "note": report["devices"]["note"]}
    assert report["determinism"] == {"ok": True, "device": "cpu"}
    assert report["broker"]["answers"] is True and report["broker"]["redis_server"]
    text = doctor(home, HOPTUNE_BROKER_URL=redis_url)
    assert text.returncode == 0
    assert text.stdout.splitlines()[-1] == "everything checked is usable"
    assert "no CUDA device is visible" in text.stdout


def test_the_embedded_broker_not_running_is_not_a_problem(home: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "HOPTUNE_BROKER_URL"}
    done = subprocess.run([sys.executable, "-m", "hoptune.tasks.cli", "doctor", "--json"],
                          cwd=home, env=env, text=True, capture_output=True, timeout=120)
    broker = json.loads(done.stdout)["broker"]
    assert broker["embedded"] and broker["ok"] and not broker["answers"]
    assert broker["note"].startswith("not running")


@pytest.mark.parametrize(("url", "shown"), [
    ("redis://:pw@host:6379/0", "redis://:***@host:6379/0"),
    ("postgresql+psycopg2://user:p%40ss@db/x", "postgresql+psycopg2://user:***@db/x"),
    ("redis://host:6379/0", "redis://host:6379/0"),
    ("sqlite:////var/lib/hoptune/studies.db", "sqlite:////var/lib/hoptune/studies.db"),
])
def test_passwords_are_masked(url: str, shown: str) -> None:
    assert _doctor.mask_url(url) == shown


def test_a_failed_self_test_on_a_gpu_is_a_problem_it_names(home: Path, monkeypatch) -> None:
    """The GPU part of the doctor, fed a fake GPU and a self-test that fails for AdamW."""

    def runner(spec, device: torch.device) -> SelfTestResult:  # noqa: ANN001
        if spec.name == "ht_adamw":
            return SelfTestResult(spec.name, str(device), False,
                                  "CompileException: ht_adamw_step is undefined")
        return SelfTestResult(spec.name, str(device), True, "", 2e-7, 0.01, 0.05)

    monkeypatch.setattr(_doctor, "gpus", lambda: [torch.device("cuda", 0)])
    monkeypatch.setattr(kernels, "time_against_torch", lambda spec, device: (0.1, 0.2))
    kernels.configure(runner=runner, identify=lambda d: {"device_name": "Test GPU"})
    try:
        checked = _doctor.kernel_checks(Settings.from_env())
    finally:
        kernels.reset()
    assert checked["ok"] is False
    rows = {r["kernel"]: r for r in checked["results"]}
    assert set(rows) == {s.name for s in _specs.ALL}
    assert rows["ht_sgd"] == {"kernel": "ht_sgd", "device": "cuda:0", "passed": True,
                              "max_error": 2e-7, "seconds": 0.05, "reason": "",
                              "kernel_ms": 0.1, "torch_ms": 0.2}
    assert not rows["ht_adamw"]["passed"]
    assert list((home / "cache" / "kernels").glob("selftest-*.json"))  # cached for the workers
    report = {"versions": _doctor.versions(), "kernels": checked,
              "devices": {"ok": True, "count": 1, "devices": [
                  {"index": 0, "name": "Test GPU", "memory_gib": 80.0,
                   "compute_capability": "9.0"}], "cupy_devices": ["Test GPU"],
                  "same_devices": True},
              "determinism": {"ok": True, "device": "cuda:0"},
              "broker": {"ok": True, "url": "redis://h", "answers": True},
              "database": {"ok": True, "url": "sqlite:///x", "answers": True},
              "store": {"ok": True, "url": "/s", "free_gib": 10.0}, "ok": False}
    text = _doctor.render(report)
    assert "GPU 0 Test GPU, 80.0 GiB, compute capability 9.0" in text
    declared = len(_specs.ALL)
    assert f"FAIL kernel self-tests: {declared - 1} of {declared} passed" in text
    assert ("ht_adamw on cuda:0: FAILED (CompileException: ht_adamw_step is undefined); the "
            "workers use the torch path for it") in text
    assert "ht_sgd on cuda:0: passed, largest error 2e-07, 0.05 s; 0.100 ms vs torch 0.200 ms" \
        in text
    assert text.endswith("something checked is not usable (FAIL above)")


def test_the_database_check_reads_the_schema_revision(home: Path) -> None:
    from hoptune.tuner import StudyDB

    StudyDB(Settings.from_env().database_url).dispose()  # a new database, at the newest revision
    checked = _doctor.database(Settings.from_env())
    assert checked["ok"] and checked["answers"] and checked["schema"] == "current"
    assert checked["revision"] == checked["head"]


def test_an_embedded_broker_that_does_not_answer_is_a_warning_not_ok(home: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "HOPTUNE_BROKER_URL"}
    done = subprocess.run([sys.executable, "-m", "hoptune.tasks.cli", "doctor"], cwd=home,
                          env=env, text=True, capture_output=True, timeout=120)
    lines = done.stdout.splitlines()
    (broker,) = [line for line in lines if " broker: " in line]
    assert broker.startswith("warn broker: redis+socket://") and "does not answer" in broker, broker
    assert not any(line.startswith("ok   broker") for line in lines)
    if done.returncode == 0:  # usable: `hoptune up` or a command starts it
        assert lines[-1] == "everything checked is usable; see the warning above (broker)"
    report = json.loads(subprocess.run(
        [sys.executable, "-m", "hoptune.tasks.cli", "doctor", "--json"], cwd=home, env=env,
        text=True, capture_output=True, timeout=120).stdout)
    assert report["broker"]["ok"] is True and report["broker"]["warn"] is True
