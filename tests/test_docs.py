"""The documentation site builds with ``mkdocs build --strict``, and README stays a front page.

The build runs as a user runs it, in a subprocess, into a temporary folder:
any warning (a broken link or anchor, a page missing from the navigation, a
snippet whose file or section is gone, an API name mkdocstrings cannot find)
fails it. The reference pages it generates are then read back: every command
and option of ``hoptune``'s parser, and every field of the configuration
schema, is on them.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# one build, shared by the module's tests: one test process runs them (--dist loadgroup)
pytestmark = pytest.mark.xdist_group("docs")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built with --strict into a temporary folder; its log must hold no warning."""
    folder = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "NO_COLOR": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(folder)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    log = done.stdout + done.stderr
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{log}"
    warnings = [line for line in log.splitlines() if re.match(r"\s*(WARNING|ERROR)\b", line)]
    assert warnings == [], "\n".join(warnings)
    return folder


def text_of(page: Path) -> str:
    """A built page's text, without its tags."""
    return re.sub(r"<[^>]+>", " ", page.read_text())


def test_readme_is_a_front_page_with_both_commands() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 200
    assert ("python3 -m venv .venv && . .venv/bin/activate && pip install -e . && hoptune demo"
            in readme)
    assert "pip install -e '.[dev]' && python -m pytest -q -n auto --dist loadgroup" in readme


def test_every_page_readme_links_to_exists() -> None:
    readme = (ROOT / "README.md").read_text()
    targets = [t.split("#")[0] for t in re.findall(r"\]\(([^)]+)\)", readme)
               if not t.startswith(("http://", "https://", "#"))]
    assert targets
    missing = [t for t in targets if not (ROOT / t).exists()
               and t != "docs/dashboard.md"]  # written with the dashboard
    assert missing == []


def test_the_site_has_every_page_of_the_navigation(site: Path) -> None:
    for page in ["index.html", "tutorial.html", "concepts.html", "configuration.html",
                 "operations/failures.html", "operations/planning.html", "reference/cli.html",
                 "reference/configuration.html", "reference/api.html", "benchmarks.html"]:
        assert (site / page).is_file(), page


def test_the_cli_reference_has_every_command_and_option(site: Path) -> None:
    from hoptune.tasks.cli import build_parser

    page = text_of(site / "reference" / "cli.html")

    def check(parser: argparse.ArgumentParser) -> None:
        assert parser.prog in page
        for action in parser._actions:
            for option in action.option_strings:
                assert option in page, f"{parser.prog} {option}"
            if isinstance(action, argparse._SubParsersAction):
                for child in action.choices.values():
                    check(child)

    check(build_parser())


def test_the_configuration_reference_has_every_field(site: Path) -> None:
    from hoptune.regions import Pruner, RatingColumns, RegionConfig, Schedule, TabularColumns

    page = text_of(site / "reference" / "configuration.html")
    for model in (RegionConfig, Pruner, Schedule, RatingColumns, TabularColumns):
        for name in model.model_fields:
            assert name in page, f"{model.__name__}.{name}"
    assert "fused_adamw" in page and "&gt;= 2" in page  # choices and bounds, from the schema


def test_the_benchmarks_page_includes_benchmarks_md(site: Path) -> None:
    page = text_of(site / "benchmarks.html")
    for heading in re.findall(r"^## (.+)$", (ROOT / "BENCHMARKS.md").read_text(), re.MULTILINE):
        words = re.sub(r"`", "", heading).split("(")[0].strip()
        assert words in page, heading


def test_the_api_reference_renders_the_public_names(site: Path) -> None:
    page = text_of(site / "reference" / "api.html")
    for name in ["load_champion", "Predictor", "FusedAdamW", "build_parser", "Settings"]:
        assert name in page
