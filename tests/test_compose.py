"""docker-compose.yml, held to the real command lines and to .env.example (Docker not needed).

Every service's command and health check is interpolated the way Compose does it, with the
values of .env.example (its empty secrets filled in, as a user must), then parsed by the real
`hoptune` parser or the real `celery` command line.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
COMPOSE: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES: dict[str, dict[str, Any]] = COMPOSE["services"]

_REFERENCE = re.compile(
    r"\$\$|\$\{(?P<name>[A-Za-z_]\w*)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\}|\$(?P<bare>[A-Za-z_]\w*)")


def read_env_file(path: Path) -> dict[str, str]:
    out = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if line.strip() and not line.lstrip().startswith("#"):
            name, sep, value = line.partition("=")
            assert sep and re.fullmatch(r"[A-Za-z_]\w*", name), f"{path.name}:{number}: {line!r}"
            out[name] = value
    return out


ENV_EXAMPLE = read_env_file(ROOT / ".env.example")
#: Compose's own variables in .env (not referenced by the file)
COMPOSE_OWN = {"COMPOSE_PROFILES"}


def user_env(**choices: str) -> dict[str, str]:
    """What a user's .env holds: the example, with its empty values (the secrets) filled in,
    ``choices`` set, and each value interpolated with those before it, as Compose reads .env."""
    out: dict[str, str] = {}
    for name, value in {**ENV_EXAMPLE, **choices}.items():
        if not value and name not in COMPOSE_OWN:
            value = f"{name.lower()}-value"
        out[name] = interpolate(value, out)
    return out


def interpolate(text: str, env: dict[str, str] | None = None) -> str:
    """Compose's ``$$``, ``$VAR``, ``${VAR}``, ``${VAR:-default}``, ``${VAR:?error}`` (and the
    forms without ':', which test only whether VAR is set)."""

    env = ENV if env is None else env

    def value(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group("name") or match.group("bare")
        op, arg = match.group("op"), match.group("arg")
        current = env.get(name)
        missing = current is None or (current == "" and op is not None and op.startswith(":"))
        if op in ("-", ":-"):
            return arg if missing else current
        if op in ("?", ":?"):
            assert not missing, f"${{{name}{op}{arg}}}: {name} is required"
        return current or ""

    return _REFERENCE.sub(value, text)


def references(node: Any) -> set[str]:
    """Every variable named anywhere in ``node`` (keys and values)."""
    if isinstance(node, dict):
        return set().union(*(references(k) | references(v) for k, v in node.items()))
    if isinstance(node, list):
        return set().union(*(references(v) for v in node))
    if isinstance(node, str):
        return {m.group("name") or m.group("bare") for m in _REFERENCE.finditer(node)
                if m.group(0) != "$$"}
    return set()


ENV = user_env()
#: The alternatives .env.example describes: RabbitMQ as the broker, the store on MinIO.
ALTERNATIVE = user_env(
    COMPOSE_PROFILES="rabbitmq,s3",
    HOPTUNE_BROKER_URL="amqp://hoptune:${RABBITMQ_PASSWORD}@rabbitmq:5672/hoptune",
    HOPTUNE_STORE_URL="s3://${HOPTUNE_BUCKET}/store")


def words(command: str | list[str]) -> list[str]:
    """A command's words before interpolation: a list as is, a string split like a shell."""
    return shlex.split(command) if isinstance(command, str) else [str(w) for w in command]


def argv(command: str | list[str]) -> list[str]:
    """A command as Compose runs it."""
    return [interpolate(w) for w in words(command)]


def environment(service: dict[str, Any], env_file: dict[str, str] | None = None
                ) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.partition("=")[::2] for item in env)
    return {k: interpolate(str(v), env_file) for k, v in env.items()}


def mounts(service: dict[str, Any]) -> dict[str, tuple[str, bool]]:
    """Container path -> (source, read-only) of the service's short-syntax volumes."""
    out = {}
    for volume in service.get("volumes", []):
        source, target, *mode = interpolate(volume).split(":")
        out[target] = (source, mode == ["ro"])
    return out


def hoptune_args(service: dict[str, Any]) -> Any:  # argparse.Namespace
    from hoptune.tasks.cli import build_parser

    return build_parser().parse_args(argv(service["command"])[1:])


HOPTUNE = sorted(n for n, s in SERVICES.items() if argv(s.get("command", []))[:1] == ["hoptune"])


def by_command(name: str) -> list[str]:
    return [n for n in HOPTUNE if argv(SERVICES[n]["command"])[1] == name]


def seconds(duration: str) -> float:
    """A Compose duration such as ``1h30m`` or ``90s``."""
    units = {"h": 3600, "m": 60, "s": 1, "ms": 0.001}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|h|m|s)", duration)
    assert parts and "".join(n + u for n, u in parts) == duration, duration
    return sum(float(n) * units[u] for n, u in parts)


def test_env_example_lists_exactly_the_variables_of_the_compose_file() -> None:
    assert references(COMPOSE) == set(ENV_EXAMPLE) - COMPOSE_OWN


def test_the_file_follows_the_compose_specification() -> None:
    """Against the Compose Specification's JSON schema (tests/compose-spec.json, from
    github.com/compose-spec/compose-spec, schema/compose-spec.json)."""
    import json

    from jsonschema import Draft7Validator

    schema = json.loads((ROOT / "tests" / "compose-spec.json").read_text())
    errors = sorted(Draft7Validator(schema).iter_errors(COMPOSE), key=lambda e: list(e.path))
    assert not errors, "\n".join(f"{'/'.join(map(str, e.path))}: {e.message}" for e in errors)


def _profiles(env: dict[str, str]) -> set[str]:
    return {p.strip() for p in env.get("COMPOSE_PROFILES", "").split(",") if p.strip()}


def _started(env: dict[str, str]) -> set[str]:
    """The services `docker compose up` starts with ``env`` as .env."""
    return {n for n, s in SERVICES.items() if not s.get("profiles")
            or set(s["profiles"]) & _profiles(env)}


@pytest.mark.parametrize("env", [ENV, ALTERNATIVE], ids=["redis-volume", "rabbitmq-s3"])
def test_the_broker_and_store_chosen_in_env_are_services_of_the_file(env: dict[str, str]
                                                                     ) -> None:
    started = _started(env)
    for name in HOPTUNE:
        service = SERVICES[name]
        if set(service.get("profiles", [])) - {"ingest"}:
            continue
        values = environment(service, env)
        broker = urlsplit(values["HOPTUNE_BROKER_URL"])
        assert broker.hostname in started, f"{name}: no service {broker.hostname} starts"
        depends = service["depends_on"]
        assert broker.hostname in depends, name
        assert depends[broker.hostname]["condition"] == "service_healthy", name
        # a dependency whose profile is off is skipped, not an error
        for other, how in depends.items():
            assert other in started or how.get("required") is False, (name, other)
        if broker.scheme == "amqp":
            rabbit = environment(SERVICES["rabbitmq"], env)
            assert broker.username == rabbit["RABBITMQ_DEFAULT_USER"]
            assert broker.password == rabbit["RABBITMQ_DEFAULT_PASS"] == env["RABBITMQ_PASSWORD"]
            assert broker.path == "/" + rabbit["RABBITMQ_DEFAULT_VHOST"]
            assert broker.port == 5672
        else:
            assert (broker.scheme, broker.port) == ("redis", 6379), name
            assert broker.password == env["REDIS_PASSWORD"], name
        store = values["HOPTUNE_STORE_URL"]
        if store.startswith("s3://") and name in by_command("worker") + by_command("beat"):
            bucket = urlsplit(store).hostname
            minio = environment(SERVICES["minio"], env)
            assert values["AWS_ACCESS_KEY_ID"] == minio["MINIO_ROOT_USER"], name
            assert values["AWS_SECRET_ACCESS_KEY"] == minio["MINIO_ROOT_PASSWORD"], name
            assert urlsplit(values["AWS_ENDPOINT_URL"]).hostname == "minio", name
            assert {"minio", "minio-bucket"} <= started
            maker = SERVICES["minio-bucket"]
            assert depends["minio-bucket"]["condition"] == "service_completed_successfully"
            # minio-bucket's `mc mb` creates exactly that bucket on that server
            command = [interpolate(w, env) for w in words(maker["command"])]
            alias, _, made = command[-1].partition("/")
            assert command[:2] == ["mb", "--ignore-existing"] and made == bucket
            server = urlsplit(environment(maker, env)[f"MC_HOST_{alias}"])
            assert (server.hostname, server.port) == ("minio", 9000)
            assert (server.username, server.password) == (minio["MINIO_ROOT_USER"],
                                                          minio["MINIO_ROOT_PASSWORD"])
        elif not store.startswith("s3://"):
            assert store in mounts(service), name
    if "amqp" in env["HOPTUNE_BROKER_URL"]:
        assert "rabbitmq" in started


def test_redis_persists_its_queues_and_requires_a_password() -> None:
    redis = SERVICES["redis"]
    words = argv(redis["command"])
    assert words[0] == "redis-server"
    assert words[words.index("--appendonly") + 1] == "yes"
    assert words[words.index("--requirepass") + 1] == ENV["REDIS_PASSWORD"]
    assert "/data" in mounts(redis)  # the append-only file outlives the container
    assert redis["healthcheck"]["test"]
    assert redis["restart"] == "unless-stopped"


def test_postgres_keeps_the_study_database_on_a_volume() -> None:
    postgres = SERVICES["postgres"]
    env = environment(postgres)
    assert env["POSTGRES_PASSWORD"] == ENV["POSTGRES_PASSWORD"]
    source, _ = mounts(postgres)["/var/lib/postgresql/data"]
    assert source in COMPOSE["volumes"]
    assert postgres["healthcheck"]["test"]
    assert postgres["restart"] == "unless-stopped"


def test_the_hoptune_services() -> None:
    assert by_command("worker") and by_command("beat") and by_command("flower")
    assert by_command("ingest") == ["ingest"]
    assert SERVICES["ingest"]["profiles"] == ["ingest"]  # one-shot: `docker compose run`
    assert SERVICES["ingest"]["restart"] == "no"
    for name in HOPTUNE:
        assert SERVICES[name]["build"]["context"] == "."
        assert SERVICES[name]["image"] == SERVICES["ingest"]["image"]
        if name != "ingest":
            assert SERVICES[name]["restart"] == "unless-stopped", name


def test_every_hoptune_service_shares_broker_database_store_config_and_timeout() -> None:
    postgres = environment(SERVICES["postgres"])
    timeouts, stores, configs = set(), set(), set()
    for name in HOPTUNE:
        service = SERVICES[name]
        env = environment(service)
        assert env["HOPTUNE_BROKER_URL"] == ENV["HOPTUNE_BROKER_URL"], name  # one, from .env
        database = urlsplit(env["HOPTUNE_DATABASE_URL"])
        assert database.scheme.startswith("postgresql") and database.hostname == "postgres"
        assert database.username == postgres["POSTGRES_USER"], name
        assert database.password == postgres["POSTGRES_PASSWORD"], name
        assert database.path == "/" + postgres["POSTGRES_DB"], name
        assert set(service["depends_on"]) >= {"redis"}, name
        assert {"redis", "postgres"} >= {n for n, how in service["depends_on"].items()
                                         if how.get("required", True)}, name

        volumes = mounts(service)
        store = env["HOPTUNE_STORE_URL"]
        assert store in volumes and volumes[store][0] in COMPOSE["volumes"], name
        stores.add((store, volumes[store][0]))
        config = Path(env["HOPTUNE_CONFIG"])
        (folder,) = [t for t in volumes if Path(t) in config.parents]
        assert volumes[folder][1], f"{name}: the configuration is mounted read-only"
        configs.add((str(config), volumes[folder][0]))
        timeouts.add(int(env["HOPTUNE_VISIBILITY_TIMEOUT"]))
    assert len(stores) == 1, stores  # one store, at the same path everywhere
    assert len(configs) == 1, configs
    assert len(timeouts) == 1 and min(timeouts) > 0, timeouts


def test_one_worker_per_gpu_with_its_own_device_shards_and_name() -> None:
    workers = by_command("worker")
    assert len(workers) >= 2
    devices, names = set(), set()
    timeout = int(ENV["HOPTUNE_VISIBILITY_TIMEOUT"])
    for name in workers:
        service = SERVICES[name]
        args = hoptune_args(service)
        (device,) = service["deploy"]["resources"]["reservations"]["devices"]
        assert device["driver"] == "nvidia" and "gpu" in device["capabilities"], name
        (device_id,) = device["device_ids"]
        devices.add(device_id)
        # The container sees only its reserved GPU, as device 0.
        assert args.gpu == 0, name
        raw = words(service["command"])
        assert references(raw[raw.index("--shards") + 1]), f"{name}: its shards come from .env"
        assert args.name and args.name.startswith(f"gpu{device_id}@"), name
        names.add(args.name)
        health = argv(service["healthcheck"]["test"])
        assert health[0] == "CMD" and health[health.index("--destination") + 1] == args.name
        # warm shutdown lets the running hop finish; a hop is bounded by the visibility timeout
        assert seconds(service["stop_grace_period"]) >= timeout, name
    assert len(devices) == len(workers) and len(names) == len(workers)


def test_exactly_one_beat_with_a_persistent_schedule() -> None:
    (beat,) = by_command("beat")
    args = hoptune_args(SERVICES[beat])
    volumes = mounts(SERVICES[beat])
    (folder,) = [t for t in volumes if Path(t) in Path(args.schedule_file).parents]
    assert volumes[folder][0] in COMPOSE["volumes"]


def test_flower_is_published_behind_basic_auth() -> None:
    (flower,) = by_command("flower")
    service = SERVICES[flower]
    args = hoptune_args(service)
    env = environment(service)
    assert env["HOPTUNE_FLOWER_USER"] == ENV["HOPTUNE_FLOWER_USER"]
    assert env["HOPTUNE_FLOWER_PASSWORD"] == ENV["HOPTUNE_FLOWER_PASSWORD"]
    (port,) = service["ports"]
    host, _, container = interpolate(port).rpartition(":")
    assert int(container) == args.port and args.address == "0.0.0.0"
    assert host.startswith("127.0.0.1:"), "published on this host's loopback only"
    assert service["healthcheck"]["test"]


def _commands() -> list[tuple[str, list[str]]]:
    out = []
    for name, service in SERVICES.items():
        if "command" in service:
            out.append((f"{name}.command", argv(service["command"])))
        test = service.get("healthcheck", {}).get("test")
        if isinstance(test, list) and test[0] == "CMD":
            out.append((f"{name}.healthcheck", argv(test[1:])))
    return out


COMMANDS = _commands()


@pytest.mark.parametrize(("where", "command"), COMMANDS, ids=[w for w, _ in COMMANDS])
def test_every_hoptune_and_celery_command_parses(where: str, command: list[str],
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    shown = shlex.join(command)
    if command[0] == "hoptune":
        from hoptune.tasks.cli import build_parser

        try:
            build_parser().parse_args(command[1:])
        except SystemExit:
            pytest.fail(f"{where}: `{shown}`: {capsys.readouterr().err.strip()}")
    elif command[0] == "celery":
        import click
        from celery.app.utils import find_app
        from celery.bin.celery import celery

        from hoptune.tasks import app

        index = next((i for i, w in enumerate(command) if w in celery.commands), None)
        assert index is not None, f"{where}: `{shown}`: no celery subcommand"
        name = command[index]
        try:
            context = celery.make_context("celery", command[1:index + 1])
            celery.commands[name].make_context(name, command[index + 1:], parent=context)
        except click.UsageError as exc:
            pytest.fail(f"{where}: `{shown}`: {exc.format_message()}")
        assert find_app(context.params["app"]) is app, f"{where}: -A must name hoptune's app"
    else:
        # the broker's and the object store's own images (mb: minio/mc's entrypoint is mc)
        assert command[0] in ("redis-server", "pg_isready", "python", "rabbitmq-diagnostics",
                              "minio", "mc", "mb"), f"{where}: `{shown}`"
