"""``hoptune db``: the study database's schema revision, and the upgrade to the newest one.

An operator upgrades with the workers stopped: ``hoptune db upgrade``, then
starts them again. ``--sql`` prints the statements instead, for a DBA to run.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from hoptune.core import Settings

if TYPE_CHECKING:
    from hoptune.tuner import Revisions

__all__ = ["add_arguments", "require_schema", "run"]

STATES = {
    "current": "up to date",
    "empty": "empty: made at the newest revision on first use",
    "legacy": "made before migrations: run `hoptune db upgrade`",
    "behind": "behind this hoptune: run `hoptune db upgrade`",
    "ahead": "ahead of this hoptune: run the hoptune that upgraded it",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The actions of ``hoptune db``: ``upgrade`` and ``current``."""
    actions = parser.add_subparsers(dest="db_action", required=True, metavar="ACTION")
    p = actions.add_parser("upgrade", help="upgrade the study database to the newest revision, "
                                           "keeping its rows (stop the workers first)")
    p.add_argument("--sql", action="store_true",
                   help="print the SQL statements instead of running them (for a DBA)")
    actions.add_parser("current", help="the database's revision and the newest this hoptune knows")


def run(args: argparse.Namespace) -> int:
    """Print the revision, or upgrade (or print the upgrade's SQL)."""
    from hoptune.tuner import schema_revisions, upgrade_schema, upgrade_schema_sql

    url = Settings.from_env().database_url
    if args.db_action == "current":
        found = schema_revisions(url)
        print(f"{found.where}: revision {found.database or 'none'}, newest known {found.head}: "
              f"{STATES[found.state]}")
    elif args.sql:
        upgrade_schema_sql(url, sys.stdout)
    else:
        print(_upgraded(*upgrade_schema(url)))
    return 0


def require_schema(settings: Settings) -> None:
    """Stop a long-running process before it starts on a schema revision it does not match.

    Workers, beat and the local cluster call it first; the ``SchemaError`` names the fix.
    """
    from hoptune.tuner import StudyDB

    StudyDB(settings.database_url).dispose()


def _upgraded(before: Revisions, after: Revisions) -> str:
    where = after.where
    if before.state == "current":
        return f"{where} is at revision {after.database}: nothing to do"
    if before.state == "empty":
        return f"{where}: made at revision {after.database}"
    if before.state == "legacy":
        return f"{where}: made before migrations, recorded as the baseline, now at {after.database}"
    return f"{where}: upgraded from revision {before.database} to {after.database}"
