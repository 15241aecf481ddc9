"""``hoptune worker``: a Celery worker that owns some shards and consumes exactly their queues.

It trains on one device (``--device``, ``--gpu``, or the first visible GPU,
else the CPU) and, unless ``--no-control``, also takes the control queue's
``tune_step`` and sweep messages. Its exit status is the Celery worker's, so a
supervisor sees a worker that could not run.
"""

from __future__ import annotations

import argparse
import os
import re
import socket

from hoptune.core import ConfigError, Settings
from hoptune.tasks.cli._args import REGION_PATTERN
from hoptune.tasks.cli._db import require_schema

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``hoptune worker``."""
    parser.add_argument("--shards", required=True, metavar="REGION:K[,REGION:K…]",
                        help="the shards this worker owns; it consumes exactly their queues")
    parser.add_argument("--gpu", type=int, default=None, metavar="INDEX",
                        help="train on this GPU, the only one the worker sees")
    parser.add_argument("--device", default=None, metavar="cpu|cuda|cuda:N",
                        help="train on this device; overrides --gpu (default: the first visible "
                             "GPU, else the CPU)")
    parser.add_argument("--kernels", choices=("auto", "cupy", "torch"), default=None,
                        help="CuPy kernels where their self-test passes (auto), always (cupy: a "
                             "failed self-test is an error), or never (torch); default "
                             "$HOPTUNE_KERNELS or auto")
    parser.add_argument("--name", default=None,
                        help="Celery node name (default: gpuN@host / hop@host)")
    parser.add_argument("--no-control", action="store_true",
                        help="do not consume the control queue (tune_step, sweep)")
    parser.add_argument("--loglevel", default="INFO")


def run(args: argparse.Namespace) -> int:
    """Run the worker until it is stopped; its exit status."""
    from hoptune.tasks.hop import graphs_mode
    from hoptune.tasks.worker import CONTROL_QUEUE, chain_seconds, hop_queue, parse_shard_spec

    owned = parse_shard_spec(args.shards)
    for region, _ in owned:
        if not re.fullmatch(REGION_PATTERN, region):
            raise ConfigError(f"--shards: bad region name {region!r} (expected {REGION_PATTERN})")
    from hoptune.tasks.worker import worker_environment

    host = socket.gethostname()
    name = args.name or (f"gpu{args.gpu}@{host}" if args.gpu is not None else f"hop@{host}")
    # the training process takes its device and kernels setting from the environment
    os.environ.update(worker_environment(args.device, args.gpu, args.kernels))
    os.environ["HOPTUNE_WORKER_SHARDS"] = args.shards
    os.environ["HOPTUNE_WORKER_NAME"] = name
    queues = [hop_queue(r, k) for r, k in owned]
    if not args.no_control:
        queues.append(CONTROL_QUEUE)
    require_schema(Settings.from_env())
    chain_seconds()  # a bad HOPTUNE_CHAIN_SECONDS stops the worker here, not every hop later
    graphs_mode()  # and a bad HOPTUNE_CUDA_GRAPHS, not every pass later
    from hoptune.tasks import app

    # Celery's Worker itself rather than its command line, whose exit status (non-zero
    # after an unrecoverable error) app.worker_main drops: a supervisor must see it.
    # no mingle (a second's wait at start to sync revoked ids and clocks with the other
    # workers: hoptune revokes nothing) and no gossip (hoptune elects nothing); the
    # workers' heartbeats and task events, which Flower and `hoptune status` read, stay on
    worker = app.Worker(hostname=name, queues=queues, concurrency=1, pool_cls="prefork",
                        loglevel=args.loglevel, send_events=True, without_mingle=True,
                        without_gossip=True)
    worker.start()
    return int(worker.exitcode or 0)
