"""The site's reference pages, generated while MkDocs builds it.

A page holds a marker (an HTML comment) where a reference goes; this hook puts
the generated Markdown in its place, so the command-line reference is always
the parser's own options and help, and the configuration reference the
schema's own fields, types, defaults and bounds:

- ``<!-- hoptune:cli -->``: every command of ``hoptune`` from
  ``hoptune.tasks.cli.build_parser`` (each subcommand, its sub-actions, every
  option with its help, choices and default);
- ``<!-- hoptune:config -->``: every table of a configuration file from the
  pydantic models' JSON schema (``hoptune.regions.RegionConfig``, ``Pruner``,
  ``Schedule``, the two column tables).

The Python API pages are mkdocstrings', which reads the source as installed:
setup.cfg's ``package_dir`` maps the top-level folders into ``hoptune``, so
before the build this hook lays out their modules under ``build/api-source/``
the way an installed wheel has them (``hoptune/core/…``), for mkdocstrings to read.
A page names each object by its public name (``::: hoptune.tuner.Predictor``);
many are re-exported lazily, which a reader of the source cannot follow, so
the hook points mkdocstrings at the module that defines it.
"""

from __future__ import annotations

import argparse
import configparser
import importlib
import json
import re
import shutil
from pathlib import Path
from typing import Any

CLI_MARKER = "<!-- hoptune:cli -->"
CONFIG_MARKER = "<!-- hoptune:config -->"
# the options every command takes: documented once, under "Global options"
GLOBAL_DESTS = {"help", "config", "home", "verbose"}
USAGE_WIDTH = 88
ROOT = Path(__file__).resolve().parents[2]
API_SOURCE = ROOT / "build" / "api-source"


def on_startup(**_: Any) -> None:
    """Lay out the packages' modules as installed, where mkdocstrings reads them.

    At startup, before any plugin's ``on_config``: mkdocstrings settles its search
    paths there, keeping only the folders that exist.
    """
    setup = configparser.ConfigParser()
    setup.read(ROOT / "setup.cfg")
    shutil.rmtree(API_SOURCE, ignore_errors=True)
    for line in setup["options"]["package_dir"].split("\n"):
        if not line.strip():
            continue
        package, folder = (part.strip() for part in line.split("=", 1))
        target = API_SOURCE.joinpath(*package.split("."))
        target.mkdir(parents=True, exist_ok=True)
        for module in (ROOT / folder).glob("*.py"):
            shutil.copyfile(module, target / module.name)


def on_page_markdown(markdown: str, **_: Any) -> str:
    """Replace each reference marker on a page with its generated Markdown."""
    markdown = re.sub(r"^::: (hoptune\.[\w.]+)$", _defined_at, markdown, flags=re.MULTILINE)
    if CLI_MARKER in markdown:
        markdown = markdown.replace(CLI_MARKER, cli_reference())
    if CONFIG_MARKER in markdown:
        markdown = markdown.replace(CONFIG_MARKER, config_reference())
    return markdown


def _defined_at(match: re.Match[str]) -> str:
    """``::: PUBLIC.NAME`` as ``::: DEFINING.MODULE.NAME`` (a missing name fails the build)."""
    module_name, _, name = match.group(1).rpartition(".")
    obj = getattr(importlib.import_module(module_name), name)
    defined = getattr(obj, "__module__", module_name)
    return f"::: {defined}.{getattr(obj, '__qualname__', name)}"


# -- the command line -------------------------------------------------------------------

def _text(text: str) -> str:
    """Help text as Markdown table text: pipes, angle brackets and stars kept literal."""
    parts = re.split(r"(`[^`]*`)", " ".join(text.split()))
    out = []
    for i, part in enumerate(parts):
        if i % 2 == 0:
            part = part.replace("<", "&lt;").replace("*", r"\*").replace("_", r"\_")
        out.append(part.replace("|", r"\|"))
    return "".join(out)


def _help(action: argparse.Action, prog: str) -> str:
    text = action.help or ""
    if "%" in text:
        text = text % {**vars(action), "prog": prog}
    return text


def _usage(parser: argparse.ArgumentParser) -> str:
    formatter = argparse.HelpFormatter(parser.prog, width=USAGE_WIDTH)
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups)
    return formatter.format_help().strip()


def _subparsers(parser: argparse.ArgumentParser) -> argparse._SubParsersAction | None:
    return next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)


def _name(action: argparse.Action) -> str:
    if action.option_strings:
        names = ", ".join(f"`{s}`" for s in action.option_strings)
        if action.nargs != 0:
            metavar = action.metavar or action.dest.upper()
            names += f" `{metavar}`" if action.nargs != "?" else f" `[{metavar}]`"
        return names
    return f"`{action.metavar or action.dest.upper()}`"


def _default(action: argparse.Action) -> str:
    if action.default in (None, False, argparse.SUPPRESS) or action.nargs == 0:
        return ""
    return f"`{action.default}`"


def _options_table(parser: argparse.ArgumentParser, skip: set[str]) -> list[str]:
    rows = []
    for action in parser._actions:
        if action.dest in skip or isinstance(action, argparse._SubParsersAction):
            continue
        help_text = _text(_help(action, parser.prog))
        if action.choices:
            help_text += " (one of " + ", ".join(f"`{c}`" for c in action.choices) + ")"
        rows.append(f"| {_name(action)} | {help_text} | {_default(action)} |")
    if not rows:
        return []
    return ["| argument or option | what it does | default |", "| --- | --- | --- |", *rows, ""]


def _command(parser: argparse.ArgumentParser, help_text: str, level: int) -> list[str]:
    lines = [f"{'#' * level} `{parser.prog}`", ""]
    if help_text:
        lines += [_text(help_text[0].upper() + help_text[1:]) + ".", ""]
    lines += ["```text", _usage(parser), "```", ""]
    lines += _options_table(parser, GLOBAL_DESTS)
    sub = _subparsers(parser)
    if sub is not None:
        helps = {a.dest: a.help or "" for a in sub._choices_actions}
        for name, child in sub.choices.items():
            lines += _command(child, helps.get(name, ""), level + 1)
    return lines


def cli_reference() -> str:
    """Markdown for every command of ``hoptune``, read from its argparse parser."""
    from hoptune.tasks.cli import build_parser

    parser = build_parser()
    lines = ["## Global options", "",
             "They stand before or after the command's name "
             "(`hoptune tune north --config x.toml` is `hoptune --config x.toml tune north`).",
             "", "```text", _usage(parser), "```", ""]
    lines += _options_table(parser, {"help"})
    sub = _subparsers(parser)
    assert sub is not None, "hoptune's parser has no commands"
    helps = {a.dest: a.help or "" for a in sub._choices_actions}
    lines += ["## Commands", ""]
    lines += [f"- [`hoptune {name}`](#hoptune-{name}): {_text(helps.get(name, ''))}"
              for name in sub.choices]
    lines.append("")
    for name, child in sub.choices.items():
        lines += _command(child, helps.get(name, ""), 3)
    return "\n".join(lines)


# -- the configuration file ---------------------------------------------------------------

def _type(schema: dict[str, Any]) -> str:
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return f"table ([{name}](#{name.lower()}))"
    if "oneOf" in schema or "anyOf" in schema:
        kinds = [_type(s) for s in schema.get("oneOf", schema.get("anyOf", []))
                 if s.get("type") != "null"]
        return " or ".join(kinds)
    kind = schema.get("type")
    if kind == "array":
        if "prefixItems" in schema:
            return "[" + ", ".join(_type(s) for s in schema["prefixItems"]) + "]"
        return f"list of {_type(schema.get('items', {}))}"
    if kind == "object":
        return "table"
    if schema.get("format") == "path":
        return "path"
    return {"integer": "integer", "number": "number", "string": "string",
            "boolean": "boolean"}.get(kind, str(kind))


def _allowed(schema: dict[str, Any]) -> str:
    for option in schema.get("anyOf", []):
        if option.get("type") != "null":
            schema = {**option, **{k: v for k, v in schema.items() if k != "anyOf"}}
    parts = []
    if "enum" in schema:
        parts.append("one of " + ", ".join(f"`{json.dumps(v)}`" for v in schema["enum"]))
    bounds = {"minimum": ">=", "exclusiveMinimum": ">", "maximum": "<=",
              "exclusiveMaximum": "<"}
    parts += [f"{sign} {schema[key]}" for key, sign in bounds.items() if key in schema]
    if "minLength" in schema:
        parts.append("not empty")
    if "minItems" in schema and "prefixItems" not in schema:
        parts.append(f"at least {schema['minItems']} item(s)")
    return ", ".join(parts)


def _toml(value: Any) -> str:
    if hasattr(value, "model_dump"):
        value = value.model_dump()
    if value is None:
        return "(none)"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, dict):
        if not value:
            return "`{}`"
        return "`{ " + ", ".join(f"{k} = {_toml(v).strip('`')}" for k, v in value.items()) + " }`"
    return f"`{json.dumps(value)}`"


def _fields_table(model: Any, schema: dict[str, Any], skip: set[str] = frozenset(),
                  derived: set[str] = frozenset()) -> list[str]:
    required = set(schema.get("required", ()))
    rows = ["| field | type | default | allowed |", "| --- | --- | --- | --- |"]
    for name, field in schema["properties"].items():
        if name in skip:
            continue
        if name in required:
            default = "required"
        elif name in derived:
            default = "from the region's name"
        else:
            default = _toml(model.model_fields[name].get_default(call_default_factory=True))
        rows.append(f"| `{name}` | {_type(field)} | {default} | {_allowed(field)} |")
    return [*rows, ""]


def _derived_from_name(model: Any) -> set[str]:
    """The fields whose value, where a region leaves them out, depends on its name."""
    def region(name: str) -> Any:
        return model.model_validate({"name": name, "data": "data.csv", "family": "rating_mf",
                                     "rating_range": [1.0, 5.0]})

    one, other = region("north"), region("south")
    return {name for name in model.model_fields
            if name != "name" and getattr(one, name) != getattr(other, name)}


def _description(schema: dict[str, Any]) -> str:
    text = schema.get("description", "").split("\n\n", 1)[0]
    return " ".join(text.replace("``", "`").split())


def config_reference() -> str:
    """Markdown for every table of a configuration file, from the pydantic JSON schema."""
    from hoptune.regions import Pruner, RatingColumns, RegionConfig, Schedule, TabularColumns

    region = RegionConfig.model_json_schema()
    defaults_model = RegionConfig.__mro__[1]  # the [defaults] table: every field a region inherits
    inherited = set(defaults_model.model_fields)
    own = [name for name in region["properties"] if name not in inherited]
    lines = ["## `[defaults]` and `[regions.NAME]`", "",
             _description(defaults_model.model_json_schema()) + " "
             + _description(region), "",
             "Every field below may stand in `[defaults]` or in a region's table; "
             "a region's value replaces the default (`params`, `space` and `pruner` merge "
             "key by key). \"required\" means every region needs it, from its own table or "
             "from `[defaults]`.", ""]
    lines += _fields_table(RegionConfig, region, set(own), _derived_from_name(RegionConfig))
    if own:
        lines += ["Set by hoptune, not in the file: "
                  + ", ".join(f"`{name}` (the table's name, `[regions.NAME]`)" for name in own)
                  + ".", ""]
    nested = {model.__name__: model for model in (Pruner, RatingColumns, TabularColumns)}
    for name, sub in region.get("$defs", {}).items():
        lines += [f"### {name}", "", _description(sub), ""]
        lines += _fields_table(nested[name], sub)
    schedule = Schedule.model_json_schema()
    lines += ["## `[schedule]`", "", _description(schedule), ""]
    lines += _fields_table(Schedule, schedule)
    return "\n".join(lines)
