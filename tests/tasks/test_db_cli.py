"""``hoptune db`` and the refusal of commands and workers on a schema they do not match.

Real subprocesses against real SQLite files: "behind" is a database made
before migrations (the recorded baseline, no revision), "ahead" one stamped
with a revision this hoptune does not know (a newer hoptune upgraded it).
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from alembic.script import ScriptDirectory

from hoptune.tuner import StudyDB
from hoptune.tuner._revisions import MIGRATIONS

HEAD = ScriptDirectory(str(MIGRATIONS)).get_current_head()
BASELINE = Path(__file__).resolve().parents[1] / "tuner" / "fixtures" / "baseline.sqlite.sql"


def hoptune(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hoptune.tasks.cli", *args], cwd=cwd, text=True,
                          capture_output=True, env=os.environ.copy(), timeout=90)


def dump(path: Path) -> list[str]:
    """The database's schema and rows, as SQL."""
    with sqlite3.connect(path) as conn:
        return list(conn.iterdump())


def make(path: Path, state: str) -> None:
    """A study database behind this hoptune (made before migrations), or ahead of it."""
    if state == "behind":
        with sqlite3.connect(path) as conn:
            conn.executescript(BASELINE.read_text())
        return
    StudyDB(f"sqlite:///{path}").dispose()
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE alembic_version SET version_num = 'f00dcafe'")


@pytest.fixture
def project(make_config: Callable[..., Path]) -> Path:
    """A folder with one region's configuration and data, nothing ingested."""
    return make_config(("north",)).parent


@pytest.mark.parametrize("state", ["behind", "ahead"])
@pytest.mark.parametrize("command", [["worker", "--shards", "north:0"],
                                     ["tune", "north", "--no-progress"],
                                     ["up", "--workers", "1"], ["beat"]],
                         ids=["worker", "tune", "up", "beat"])
def test_a_worker_and_a_command_refuse_a_schema_they_do_not_match(
        project: Path, command: list[str], state: str) -> None:
    db = project / "studies.db"
    make(db, state)
    recorded = dump(db)
    result = hoptune(*command, cwd=project)
    where = f"hoptune: error: study database sqlite:///{db}"
    expected = {
        "behind": f"{where} has no schema revision (made before hoptune had migrations); this "
                  f"hoptune needs revision {HEAD}: run `hoptune db upgrade`\n",
        "ahead": f"{where} is at schema revision f00dcafe, newer than this hoptune knows (it "
                 f"needs {HEAD}): run the hoptune that upgraded it (pip install --upgrade "
                 "hoptune)\n",
    }
    assert (result.returncode, result.stderr) == (2, expected[state])
    assert dump(db) == recorded
    assert not (project / "store").exists(), "nothing ingested"


def test_db_current_says_where_the_database_stands(project: Path) -> None:
    db = project / "studies.db"
    where = f"study database sqlite:///{db}"
    empty = hoptune("db", "current", cwd=project)
    assert (empty.returncode, empty.stdout) == (
        0, f"{where}: revision none, newest known {HEAD}: empty: made at the newest revision on "
           "first use\n")
    assert not db.exists(), "looking made no database"
    make(db, "behind")
    assert hoptune("db", "current", cwd=project).stdout == (
        f"{where}: revision none, newest known {HEAD}: made before migrations: run "
        "`hoptune db upgrade`\n")
    upgraded = hoptune("db", "upgrade", cwd=project)
    assert upgraded.stdout == f"{where}: made before migrations, recorded as the baseline, now " \
                              f"at {HEAD}\n"
    assert hoptune("db", "current", cwd=project).stdout == (
        f"{where}: revision {HEAD}, newest known {HEAD}: up to date\n")
    again = hoptune("db", "upgrade", cwd=project)
    assert (again.returncode, again.stdout) == (0,
                                                f"{where} is at revision {HEAD}: nothing to do\n")


def test_db_upgrade_makes_a_new_database_and_refuses_one_ahead(project: Path) -> None:
    db = project / "studies.db"
    made = hoptune("db", "upgrade", cwd=project)
    assert (made.returncode, made.stdout) == (0, f"study database sqlite:///{db}: made at "
                                                 f"revision {HEAD}\n")
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE alembic_version SET version_num = 'f00dcafe'")
    recorded = dump(db)
    ahead = hoptune("db", "upgrade", cwd=project)
    assert ahead.returncode == 2
    assert ahead.stderr.startswith(f"hoptune: error: study database sqlite:///{db} is at "
                                   "schema revision f00dcafe, newer than this hoptune knows")
    assert ahead.stderr.count("\n") == 1
    assert hoptune("db", "current", cwd=project).stdout.endswith(
        f"revision f00dcafe, newest known {HEAD}: ahead of this hoptune: run the hoptune that "
        "upgraded it\n")
    assert dump(db) == recorded
