"""Fault injection: a Redis server each test starts and kills itself, and real workers.

Every scenario runs fixed trial configurations (no optimizer proposals), so
what a study trains does not depend on timing, and its weights can be
compared bitwise with a fault-free run of the same configurations.
"""

from __future__ import annotations

import re
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from hoptune.tuner import HopRecords, HopRow
from tests.faults.cluster import RabbitVhost, RedisServer, Workers, rabbitmq_missing
from tests.logs import print_log_tails

CONFIG = """
[defaults]
shards = {shards}
epochs = {epochs}
batch_size = 64
seed = 5
validation_fraction = 0.2
optimizer = "fused_adamw"
trials = {trials}
parallel = {parallel}
max_redeliveries = 2
{space}
[defaults.params]
embedding_dim = 4
lr = 0.02
reg = 0.0001
[regions.north]
data = "data/north.csv"
family = "rating_mf"
task = "rating"
columns = {{ user = "user_id", item = "item_id", rating = "rating" }}
rating_range = [1.0, 5.0]
"""


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups off the items
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every fault scenario runs in one xdist group (``--dist loadgroup``): one at a time, on
    one test process. Each kills processes and waits on liveness bounds of seconds; two of
    them at once on a 2-core host would starve each other's workers past those bounds."""
    here = Path(__file__).parent
    for item in items:
        if item.path.is_relative_to(here):
            item.add_marker(pytest.mark.xdist_group("faults"))


@pytest.fixture
def start_redis(tmp_path: Path) -> Iterator[Callable[..., RedisServer]]:
    """Start Redis servers of this test's own; all are killed after it."""
    started: list[RedisServer] = []

    def start(password: str | None = None) -> RedisServer:
        started.append(RedisServer(tmp_path / f"redis{len(started)}", password).start())
        return started[-1]

    yield start
    for server in started:
        server.kill()


#: The brokers a test marked ``@pytest.mark.parametrize("broker", BROKERS, indirect=True)``
#: runs against, the way a storage test runs against every backend.
BROKERS = ["redis", "rabbitmq"]


@pytest.fixture
def broker(request: pytest.FixtureRequest, start_redis: Callable[..., RedisServer]
           ) -> Iterator[RedisServer | RabbitVhost]:
    """The scenario's broker: a Redis server of its own (unless parametrised otherwise), or a
    virtual host of the machine's RabbitMQ, deleted after; skipped where none answers."""
    kind = getattr(request, "param", "redis")
    if kind == "redis":
        yield start_redis()
        return
    missing = rabbitmq_missing()
    if missing:
        pytest.skip(f"RabbitMQ variant: {missing}")
    vhost = RabbitVhost().start()
    try:
        yield vhost
    finally:
        vhost.delete()


@pytest.fixture
def redis_server(broker: RedisServer | RabbitVhost) -> RedisServer:
    assert isinstance(broker, RedisServer), "this test needs Redis"
    return broker


@pytest.fixture
def fault_env(home: Path, broker: RedisServer | RabbitVhost, monkeypatch: pytest.MonkeyPatch
              ) -> dict[str, str]:
    """The environment of every process of the scenario: its own broker, short bounds."""
    env = {"HOPTUNE_BROKER_URL": broker.url, "HOPTUNE_HOME": str(home),
           # liveness bounds of seconds, not minutes: a scenario recovers in seconds
           "HOPTUNE_HEARTBEAT_SECONDS": "0.5", "HOPTUNE_LIVENESS_SECONDS": "4",
           "HOPTUNE_SWEEP_SECONDS": "1", "HOPTUNE_RESEND_SECONDS": "3",
           "HOPTUNE_TAKEOVER_SECONDS": "4"}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return env


@pytest.fixture
def write_config(home: Path) -> Callable[..., Path]:
    """Synthetic ratings for region ``north`` and a configuration file; returns its path."""
    from hoptune.regions import write_ratings

    def write(*, shards: int = 2, epochs: int = 2, trials: int = 2, parallel: int = 2,
              tuned: bool = False) -> Path:
        write_ratings(home / "data" / "north.csv", n_users=60, n_items=50, n_rows=1200,
                      rank=2, noise=0.3, seed=21)
        path = home / "hoptune.toml"
        space = 'space = { lr = { type = "real", low = 0.005, high = 0.05 } }' if tuned else ""
        path.write_text(CONFIG.format(shards=shards, epochs=epochs, trials=trials,
                                      parallel=parallel, space=space))
        return path

    return write


#: How many of each worker log's last lines a failed test prints.
LOG_TAIL = 200


@pytest.fixture
def workers(request: pytest.FixtureRequest, fault_env: dict[str, str], home: Path,
            broker: RedisServer | RabbitVhost) -> Iterator[Workers]:
    """The test's worker processes; a failed test's report ends with each one's log (the home
    that holds them goes with the test)."""
    group = Workers(fault_env, home / "logs", broker)
    yield group
    group.stop_all()
    print_log_tails(request, home / "logs", LOG_TAIL)


FACTORY = '''"""A rating model that raises while a marker file says so (fault injection)."""

import os
from pathlib import Path

import torch
from torch import nn



def markers() -> Path:
    """Where the test puts its markers: this process's home, read at each call (a module
    imported once serves every test of a process)."""
    return Path(os.environ["HOPTUNE_HOME"])


class Rating(nn.Module):
    def __init__(self, n_users: int, n_items: int, mean: float, dim: int) -> None:
        super().__init__()
        self.user = nn.Embedding(n_users, dim)
        self.item = nn.Embedding(n_items, dim)
        self.mean = mean

    def forward(self, batch: dict) -> torch.Tensor:
        once = markers() / "raise-once"
        if once.exists():
            once.unlink()
            raise RuntimeError("injected: fails on this delivery only")
        if (markers() / "raise-always").exists():
            raise RuntimeError("injected: fails on every delivery")
        return self.mean + (self.user(batch["user"]) * self.item(batch["item"])).sum(-1)


def build(params: dict, meta: dict) -> nn.Module:
    # in a worker only: the command that records the study builds one too, to ask its
    # objective, and that is not the fault under test
    if (markers() / "factory-raises").exists() and os.environ.get("HOPTUNE_WORKER_SHARDS"):
        raise ValueError("injected: the factory cannot build this model")
    torch.manual_seed(0)
    return Rating(meta["n_users"], meta["n_items"], meta["rating_mean"],
                  params["embedding_dim"])


build.params = {"embedding_dim": 4}
'''

#: The fixed configurations every scenario trains (different enough to tell apart).
CONFIGS = [{"lr": 0.01}, {"lr": 0.02}, {"lr": 0.04}, {"lr": 0.03}]


class Scenario:
    """One study of fixed trials on real workers, and the checks every fault scenario makes.

    ``check`` holds the promises: the study spends its budget and its
    promotion is decided with nobody's help; every trial of it finished;
    every epoch visited each shard exactly once; no hop trained twice
    (counted from the workers' own "trained hop" lines, not from rows); and
    every trial's final weights are bitwise those of replaying it in one
    process in its recorded visit order.
    """

    def __init__(self, home: Path, workers: Workers, write_config: Callable[..., Path]) -> None:
        self.home, self.workers, self.write_config = home, workers, write_config
        self.app = workers.redis.app()
        self.rt = None
        self.kills: list[float] = []

    def runtime(self):  # noqa: ANN201 - tasks.Runtime
        from hoptune.core import Settings
        from hoptune.tasks import Runtime

        if self.rt is None:
            self.rt = Runtime(Settings.from_env(), worker="faults")
        return self.rt

    def start(self, *, shards: int = 2, epochs: int = 2, configs: list[dict] | None = None,
              parallel: int = 2, factory: bool = False, space: dict | None = None) -> int:
        from hoptune.regions import ingest, load_config
        from hoptune.tasks import create_study, send
        from hoptune.tasks.worker._messages import tune_step_dispatch

        configs = configs or CONFIGS
        path = self.write_config(shards=shards, epochs=epochs, trials=len(configs),
                                 parallel=parallel)
        if factory:
            assert self.workers.env.get("PYTHONPATH") == str(self.home), "use_factory() first"
            text = path.read_text().replace('family = "rating_mf"',
                                            'family = "faulty_factory:build"')
            # the factory reads embedding_dim only: a name it does not read is refused
            path.write_text("\n".join(line for line in text.splitlines()
                                      if not line.startswith("reg ")) + "\n")
        region = load_config(path).region("north")
        rt = self.runtime()
        manifest = ingest(region, rt.store).manifest
        study = create_study(rt, region, manifest=manifest, configs=configs, parallel=parallel)
        if space is not None:  # fixed trials, pruned at the rungs as a tuned study's are
            rt.db.set_study(study, space=space)
        send([tune_step_dispatch(study)], self.app)
        return study

    def use_factory(self) -> None:
        """Put the fault-injecting factory where the workers (started after this) import it."""
        (self.home / "faulty_factory.py").write_text(FACTORY)
        self.workers.env["PYTHONPATH"] = str(self.home)
        sys.path.insert(0, str(self.home))  # the replay in this process builds it too

    def wait_until(self, condition: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() >= deadline:
                raise AssertionError(f"timed out waiting for {what}\n{self.explain()}")
            time.sleep(0.05)

    def explain(self) -> str:
        """What a timed-out wait leaves to read: every hop's row and each worker's last lines."""
        lines = ["hops:"]
        try:
            for h in HopRecords(self.runtime().db).all():
                lines.append("  " + ", ".join(f"{k}={getattr(h, k)!r}" for k in (
                    "trial_id", "epoch", "position", "shard", "state", "worker", "deliveries",
                    "interrupted", "error")))
        except Exception as exc:  # noqa: BLE001 - a broken database is itself the answer
            lines.append(f"  (could not read: {exc!r})")
        for log in sorted(self.workers.log_dir.glob("*.log")):
            tail = log.read_text(errors="replace").splitlines()[-40:]
            lines += [f"{log.name}:"] + [f"  {line}" for line in tail]
        return "\n".join(lines)

    def running_hop(self, worker: str | None = None) -> HopRow:
        """Wait for a hop in flight (on ``worker``, a name given to ``Workers.start``)."""
        rt = self.runtime()
        found: list[HopRow] = []

        def some() -> bool:
            found[:] = [h for h in HopRecords(rt.db).all() if h.state == "running"
                        and (worker is None or h.worker == f"{worker}@faults")]
            return bool(found)

        self.wait_until(some, 120, f"a hop running on {worker or 'any worker'}")
        return found[0]

    def settle(self, study: int, timeout: float = 180) -> dict:
        from hoptune.tasks.cli._follow import settled

        rt = self.runtime()
        self.wait_until(lambda: settled(rt.db.study(study)), timeout, f"study {study} to end")
        return rt.db.study(study)

    def trainings(self) -> Counter:
        """How often each (trial, epoch, position) was trained, from every worker's log."""
        counts: Counter = Counter()
        for log in self.workers.log_dir.glob("*.log"):
            for m in TRAINED.finditer(log.read_text(errors="replace")):
                counts[tuple(int(g) for g in m.groups())] += 1
        return counts

    def check(self, study_id: int, *, trained_twice_allowed: int = 0) -> dict:
        import torch

        from hoptune.tasks import replay_trial
        from hoptune.tasks.worker._checkpoint import checkpoint_key, load_checkpoint

        rt = self.runtime()
        study = rt.db.study(study_id)
        assert study.state == "done", study
        assert study.promotion is not None and not study.promotion.get("failed")
        trials = rt.db.trials(study_id)
        assert len(trials) == study.budget
        assert all(t.state in ("done", "pruned") for t in trials), \
            [(t.number, t.state, t.failure) for t in trials]
        shards = study.region_config["shards"]
        hops = HopRecords(rt.db).all(study_id=study_id)
        for trial in trials:
            for record in rt.db.epochs(trial.id)[: trial.epochs_done]:
                rows = [h for h in hops if h.trial_id == trial.id
                        and h.epoch == record.epoch]
                assert sorted(h.shard for h in rows) == list(range(shards))
                assert all(h.state == "done" for h in rows)
                assert [h.shard for h in sorted(rows, key=lambda h: h.position)] == \
                    record.visit_order
        twice = {k: n for k, n in self.trainings().items() if n > 1}
        assert len(twice) <= trained_twice_allowed, (twice, [
            (h.trial_id, h.epoch, h.position, h.state, h.worker, h.deliveries, h.interrupted,
             h.error) for h in hops if (h.trial_id, h.epoch, h.position) in twice])
        for trial in trials:
            final = checkpoint_key(study_id, trial.id, trial.epochs_done - 1, shards - 1)
            weights = load_checkpoint(rt.store, final).model
            replayed = replay_trial(rt, trial.id, trial.epochs_done)
            for name, tensor in replayed.items():
                assert torch.equal(weights[name], tensor), (trial.number, name)
        return study

    def recovery_seconds(self, hop: HopRow, after: float) -> float:
        """From ``after`` (a kill, as time.time()) to when hop ``hop`` started again.

        If that hop had finished before the kill landed, to the first hop that
        started after it.
        """
        rows = HopRecords(self.runtime().db).all()
        key = (hop.trial_id, hop.epoch, hop.position)
        again = [h.started_at.timestamp() for h in rows
                 if (h.trial_id, h.epoch, h.position) == key
                 and h.started_at is not None and h.started_at.timestamp() > after]
        later = again or [h.started_at.timestamp() for h in rows
                          if h.started_at is not None and h.started_at.timestamp() > after]
        return min(later) - after


TRAINED = re.compile(r"trained hop: trial (\d+) epoch (\d+) position (\d+)")


@pytest.fixture
def scenario(home: Path, workers: Workers, write_config: Callable[..., Path]
             ) -> Iterator[Scenario]:
    s = Scenario(home, workers, write_config)
    yield s
    if s.rt is not None:
        s.rt.db.dispose()
