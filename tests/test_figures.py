"""README quotes no benchmark figure that BENCHMARKS.md does not hold.

Figures come from one source: the benchmarks write BENCHMARKS.md with their
machine and command, and README points there. A number with a unit of time,
a percentage or a bandwidth in README's prose must appear in BENCHMARKS.md.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NUMBER = r"\d+(?:\.\d+)?"
FIGURE = re.compile(rf"(?<![\w.])({NUMBER})(?:\s*[-–]\s*({NUMBER}))?\s*(?:s|ms|%|GB/s|x)(?!\w)")


def prose(text: str) -> str:
    """Markdown without its fenced code blocks (commands and configuration, not claims)."""
    return re.sub(r"```.*?```", "", text, flags=re.DOTALL)


def quoted_figures(text: str) -> list[tuple[str, list[str]]]:
    """Each figure in text and its numbers: '1.4-2.1 s' -> ('1.4-2.1 s', ['1.4', '2.1'])."""
    return [(m.group(0), [n for n in m.groups() if n]) for m in FIGURE.finditer(prose(text))]


def test_the_pattern_finds_figures() -> None:
    text = "took 1.4-2.1 s, 4.4% of a hop, 0.693 ms and 5.9 GB/s; shards = 2 and 3 trials"
    assert [f for f, _ in quoted_figures(text)] == ["1.4-2.1 s", "4.4%", "0.693 ms",
                                                   "5.9 GB/s"]


def test_every_figure_readme_quotes_is_in_benchmarks() -> None:
    benchmarks = set(re.findall(NUMBER, (ROOT / "BENCHMARKS.md").read_text()))
    missing = [figure for figure, numbers in quoted_figures((ROOT / "README.md").read_text())
               if not set(numbers) <= benchmarks]
    assert missing == [], f"README quotes figures BENCHMARKS.md does not hold: {missing}"
