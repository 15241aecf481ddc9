"""The prose quotes no benchmark figure that BENCHMARKS.md does not hold.

Figures come from one source: the benchmarks write BENCHMARKS.md with their
machine and command, and README and the documentation pages (``docs/*.md``)
quote it. The rule this test holds them to:

- Prose is Markdown without fenced code blocks, inline code, HTML comments,
  link targets and snippet includes (commands, settings and configuration
  are not claims). It is read block by block: a paragraph, a list item, or a
  table together with the paragraph that introduces it.
- A block *cites a benchmark* when it names a bench (``bench/NAME.py``),
  BENCHMARKS.md, or a row or run of its tables ("row G", "rows C against A",
  "run I"). In such a block every number is a figure: times, ratios, counts
  of epochs, metrics without a unit, and both ends of a range ("0.36 to
  0.43", "34.21 to 35.30 s", "3% to 17%").
- Anywhere else, a number with a decimal point, a percentage or a ratio
  ("4.1x") is a figure too: prose quotes such numbers only as measurements.
- Not figures: a number right after a setting's name in code, which is that
  setting's value (``HOPTUNE_LIVENESS_SECONDS`` (30), ``fuse`` > 1); a
  number inside a name or a size written as code or as a word with letters
  ("MovieLens 100k", "1e5 parameters" is a figure only as ``1e5``); versions
  and addresses with two or more dots.
- A figure agrees with BENCHMARKS.md when the same value (4.1 is 4.10) stands
  in the sections of BENCHMARKS.md the block cites: those of the benches it
  names (each section says its bench), and for rows and runs the sections of
  ``bench/quality.py``; a block that cites only BENCHMARKS.md is compared
  with the whole file.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# a number: 12, 0.9148, 925,420, 1e5, or 4.1 of "4.1x"; not part of a name, version or address
NUMBER = re.compile(r"(?<![\w.,/])\d+(?:,\d{3})*(?:\.\d+)?(?:e\d+)?(?!(?!x\b)\w|\.\w|,\d{3})")
BENCH = re.compile(r"bench/(\w+)\.py")
ROW_OR_RUN = re.compile(r"\b[Rr](?:ows?|uns?) [A-Z]\b")
SETTING_VALUE = re.compile(r"`[^`]*`\s*[(,>=<]?\s*$")
WHOLE = re.compile(r"^\d+(?:,\d{3})*$")


def prose(text: str) -> str:
    """Markdown as prose: no fenced code, HTML comments, snippet includes or link targets.

    Inline code stays (as ``CODE``) so that a setting's value can be told from
    a figure; ``numbers_in`` skips what is inside it.
    """
    text = re.sub(r"^```.*?^```", "", text, flags=re.DOTALL | re.MULTILINE)
    text = re.sub(r"<!--.*?-->", "", text, flags=re.DOTALL)
    text = re.sub(r"^--8<--.*$", "", text, flags=re.MULTILINE)
    return re.sub(r"\]\([^)]*\)", "]", text)


def blocks(text: str) -> list[str]:
    """Paragraphs and list items; a table goes with the paragraph before it."""
    out: list[str] = []
    for chunk in re.split(r"\n\s*\n", prose(text)):
        items = re.split(r"\n(?=\s*(?:[-*]|\d+\.) )", chunk.strip())
        for item in items:
            if item.lstrip().startswith("|") and out:
                out[-1] += "\n" + item
            elif item.strip():
                out.append(item)
    return out


def numbers_in(block: str) -> list[tuple[str, str, str]]:
    """Each number of a block outside inline code, the text before it, the next character."""
    found = []
    spans = [m.span() for m in re.finditer(r"`[^`]*`", block)]
    for match in NUMBER.finditer(block):
        if any(start <= match.start() < end for start, end in spans):
            continue
        found.append((match.group(0), block[max(0, match.start() - 60):match.start()],
                      block[match.end():match.end() + 1]))
    return found


def cited_sections(block: str, benchmarks: str) -> list[str] | None:
    """The sections of BENCHMARKS.md a block cites; None when it cites none."""
    sections = re.split(r"\n(?=## )", benchmarks)
    names = set(BENCH.findall(block))
    if ROW_OR_RUN.search(block):
        names.add("quality")
    if names:
        chosen = [s for s in sections if any(f"bench/{n}.py" in s for n in names)]
        return chosen or [benchmarks]
    if "BENCHMARKS.md" in block:
        return [benchmarks]
    return None


def value(number: str) -> float:
    return float(number.replace(",", ""))


def figures(text: str, benchmarks: str) -> list[tuple[str, str, list[str]]]:
    """Each figure the prose quotes: (the number, its context, the BENCHMARKS text to hold it).

    The text to hold it is the cited sections, or the whole file for a figure
    outside a citing block (a decimal, a percentage or a ratio).
    """
    out = []
    for block in blocks(text):
        cited = cited_sections(block, benchmarks)
        for number, before, after in numbers_in(block):
            if SETTING_VALUE.search(before):
                continue
            if cited is None:
                if WHOLE.match(number) and after not in ("%", "x"):
                    continue
                out.append((number, before, [benchmarks]))
            else:
                out.append((number, before, cited))
    return out


def disagreeing(text: str, benchmarks: str) -> list[str]:
    """The figures of text that the BENCHMARKS.md sections they cite do not hold."""
    wrong = []
    for number, before, sources in figures(text, benchmarks):
        held = {value(n) for source in sources for n in NUMBER.findall(source)}
        if value(number) not in held:
            context = " ".join(before.split()[-6:])
            wrong.append(f"{number} (after '{context}')")
    return wrong


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


BENCHMARKS_TEXT = """## Fused cohorts (`bench/fusion.py`)
| demo rating model | cpu | 8 | 7.22 | 29.59 | 4.10x | 3.5% |

## End to end (`bench/e2e.py`)
fusing was 3% to 17% faster than not: 4.62 s against 5.54 s; a mean best of 0.7998.

## Choosing the defaults (`bench/quality.py`)
| G | 0, 1 | `--set` | 0.9148 (57.5 ep) |
"""


def test_figures_of_every_kind_are_found() -> None:
    text = ("In `bench/e2e.py` fusing was 3% to 17% faster (4.62 s against 5.54 s) at a mean "
            "best of 0.7998; `bench/fusion.py`: 4.1x for a cohort of 8. Row G: 0.9148 at "
            "57.5 epochs. Elsewhere a ratio of 0.84x and 12% are figures too.")
    found = [number for number, _, _ in figures(text, BENCHMARKS_TEXT)]
    assert found == ["3", "17", "4.62", "5.54", "0.7998", "4.1", "8", "0.9148", "57.5",
                     "0.84", "12"]


def test_settings_commands_and_names_are_not_figures() -> None:
    text = ("Every worker beats every `HOPTUNE_HEARTBEAT_SECONDS` (5); one silent for "
            "`HOPTUNE_LIVENESS_SECONDS` (30) is gone (`bench/load.py` measures it). "
            "`fuse` > 1 fuses. MovieLens 100k on Python 3.11.7 at 127.0.0.1.\n\n"
            "A hop is retried once after 2 s.\n\n```sh\nhoptune plan --workers 4.5\n```\n\n"
            "A region fuses with `fuse = 2.5`.")
    assert figures(text, BENCHMARKS_TEXT) == []


def test_a_planted_wrong_figure_fails() -> None:
    right = ("In `bench/e2e.py` fusing was 3% to 17% faster: 4.62 s against 5.54 s. "
             "Row G: 0.9148 at 57.5 epochs; a cohort of 8 trains 4.1x (`bench/fusion.py`).")
    assert disagreeing(right, BENCHMARKS_TEXT) == []
    for good, planted, number in [("3% to 17%", "4% to 17%", "4"),  # a range's first number
                                  ("3% to 17%", "3% to 9%", "9"),   # its last
                                  ("4.62 s", "4.63 s", "4.63"),     # a time
                                  ("0.9148", "0.9149", "0.9149"),   # a metric without a unit
                                  ("4.1x", "4.2x", "4.2"),          # a ratio
                                  ("57.5 epochs", "56.5 epochs", "56.5")]:
        wrong = disagreeing(right.replace(good, planted), BENCHMARKS_TEXT)
        assert [w.split()[0] for w in wrong] == [number], (planted, wrong)


def test_a_figure_is_held_to_the_section_it_cites() -> None:
    # 0.7998 is in BENCHMARKS_TEXT, but not in the section of the bench this sentence cites
    text = "`bench/fusion.py`: a cohort of 8 reached 0.7998."
    assert disagreeing(text, BENCHMARKS_TEXT) == ["0.7998 (after '`bench/fusion.py`: a cohort of 8 "
                                                  "reached')"]


def test_a_decimal_outside_a_citing_block_is_held_to_the_whole_file() -> None:
    assert disagreeing("It took 4.62 s.", BENCHMARKS_TEXT) == []
    assert disagreeing("It took 4.63 s.", BENCHMARKS_TEXT) == ["4.63 (after 'It took')"]


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_figure_the_prose_quotes_is_in_benchmarks(page: Path) -> None:
    benchmarks = (ROOT / "BENCHMARKS.md").read_text()
    wrong = disagreeing(page.read_text(), benchmarks)
    assert wrong == [], (f"{page.relative_to(ROOT)} quotes figures that the BENCHMARKS.md "
                         f"sections it cites do not hold: {wrong}")
