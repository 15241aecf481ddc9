"""``hoptune nightly``: the nightly retraining, by hand, for every region (or those named).

Each region is re-ingested and tuned warm from its last study; the winner is
promoted if it beats the champion. The command follows the studies until the
run's promotions are recorded (or returns at once with ``--detach``); its exit
status is 1 when a region failed or was still running.
"""

from __future__ import annotations

import argparse
from contextlib import ExitStack

from hoptune.core import Settings
from hoptune.tasks.cli._args import add_follow_options, read_config, region_names

__all__ = ["add_arguments", "run"]

def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``hoptune nightly``."""
    parser.add_argument("--regions", type=region_names, default=None, metavar="R1,R2",
                        help="only these regions (default: all)")
    add_follow_options(parser, "start the run")


def run(args: argparse.Namespace) -> int:
    """Start the nightly run, follow it and print each region's outcome."""
    from hoptune.tasks import app, send
    from hoptune.tasks.cli._cluster import default_workers, local_cluster
    from hoptune.tasks.cli._follow import follow, format_table
    from hoptune.tasks.plan import ingest_region, local_shards, log_nightly_plan
    from hoptune.tasks.study import begin_nightly, cancel_nightly, start_nightly
    from hoptune.tasks.worker import Runtime
    from hoptune.tuner import NightlyRecords

    settings = Settings.from_env()
    config = read_config(args)
    rt = Runtime(settings, worker="cli")
    names = args.regions or list(config.regions)
    regions = [config.region(n) for n in names]  # an unknown name stops here, before the lock
    shards = {}
    if args.local_workers is not None:  # "auto" regions ingested now: their K is known
        count = args.local_workers or default_workers()
        shards = {r.name: local_shards(rt, r, count) for r in regions}
    # the lock first: a run refused (another is going) starts no worker on the broker the
    # going run's workers share, and those would take its hops until stopped
    run_id = begin_nightly(rt, trigger="cli")
    with ExitStack() as stack:
        try:
            stack.enter_context(local_cluster(settings, shards, args.local_workers))
        except BaseException:
            cancel_nightly(rt, run_id)  # no worker to train it: nothing started, lock freed
            raise
        run_id, dispatches = start_nightly(rt, config, args.regions, trigger="cli",
                                           ingested=ingest_region, run_id=run_id)
        send(dispatches, app)
        print(f"nightly run {run_id}: {len(dispatches)} studies started", flush=True)
        log_nightly_plan(rt, config, run_id)
        if args.detach:
            return 0
        studies = [r["study_id"] for r in NightlyRecords(rt.db).regions(run_id)
                   if r["study_id"] is not None]
        # returns once each region's outcome is recorded: the last one's ends the run
        follow(rt, app, studies, progress=not args.no_progress)
    rows = NightlyRecords(rt.db).regions(run_id)
    print(format_table(rows, ["region", "state", "study_id", "ingested", "outcome"]))
    return 1 if any(r["state"] in ("failed", "running") for r in rows) else 0
