"""Write the CLI reference (docs/reference/cli.md) from the Typer app.

    python docs/gen_cli.py           # write docs/reference/cli.md
    python docs/gen_cli.py --check   # exit 1 when docs/reference/cli.md differs from what would be written

Every command and subcommand gets its usage line, its help text and a table of its arguments and
options (help, type or choices, default). Commands and parameters keep the order Click gives them;
the usage lines are laid out at a fixed width, so the output does not depend on the terminal.
Importing this module does nothing; `render()` returns the page as a string.
"""

from __future__ import annotations

import argparse
import enum
import inspect
import re
import sys
from pathlib import Path
from typing import Any

WIDTH = 100  # fixed help width: the page must not depend on the terminal it was generated in
PROG = "vitexport"
DOCS = Path(__file__).resolve().parent
TARGET = DOCS / "reference" / "cli.md"
REGENERATE = "python docs/gen_cli.py"

HEADER = f"""# CLI reference

<!-- Generated from the Typer app by `{REGENERATE}`; do not edit by hand. -->

Every command and its flags, as `{PROG} COMMAND --help` prints them. Every command also takes
`--help`. The manual explains what the flags do: start at [Quickstart](../quickstart.md) or the
[backends](../backends/index.md).
"""

_CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.DOTALL)
_PROSE_SPECIALS = re.compile(r"([\\*_\[\]|#])")


def _escape_prose(text: str) -> str:
    text = _PROSE_SPECIALS.sub(r"\\\1", text.replace("&", "&amp;"))
    return text.replace("<", "&lt;").replace(">", "&gt;")


def _escape(text: str) -> str:
    """Markdown-safe prose: special characters escaped outside code spans, code spans kept as they are."""
    out, last = [], 0
    for match in _CODE_SPAN.finditer(text):
        out.append(_escape_prose(text[last:match.start()]))
        out.append(match.group(0))
        last = match.end()
    out.append(_escape_prose(text[last:]))
    return "".join(out)


def _help_text(text: str | None) -> str:
    """A command's help as Markdown paragraphs (Click's conventions: `\\f` ends the help, a paragraph
    starting with `\\b` keeps its line breaks)."""
    if not text:
        return ""
    text = inspect.cleandoc(text).split("\f", 1)[0]
    paragraphs = []
    for paragraph in re.split(r"\n\s*\n", text.strip()):
        if paragraph.startswith("\b"):
            lines = paragraph[1:].strip("\n").splitlines()
            paragraphs.append("```text\n" + "\n".join(line.rstrip() for line in lines) + "\n```")
        else:
            paragraphs.append(_escape(" ".join(line.strip() for line in paragraph.splitlines())))
    return "\n\n".join(paragraphs)


def _cell(text: str) -> str:
    """One table cell: a single line, pipes escaped."""
    return _escape(" ".join(text.split())) if text else ""


def _context(command: Any, name: str, parent: Any = None) -> Any:
    return command.context_class(command, info_name=name, parent=parent, terminal_width=WIDTH,
                                 max_content_width=WIDTH)


def _is_option(param: Any) -> bool:
    return getattr(param, "param_type_name", "") == "option"


def _names(param: Any) -> str:
    if _is_option(param):
        names = ", ".join(f"`{o}`" for o in param.opts)
        if param.secondary_opts:
            names += " / " + ", ".join(f"`{o}`" for o in param.secondary_opts)
        return names
    name = param.metavar or (param.name or "").upper()
    return f"`{name}{'...' if param.nargs != 1 else ''}`"


def _type(param: Any, ctx: Any) -> str:
    if _is_option(param) and getattr(param, "is_flag", False) and not getattr(param, "count", False):
        return "flag"
    if hasattr(param, "display_type"):  # Typer's own parameters: "<int>", "<a|b>", "<list[str]>"
        label = param.display_type(ctx)
        label = label[1:-1] if label.startswith("<") and label.endswith(">") else label
        choices = label.split("|") if "|" in label else None
    else:  # Click's
        kind = getattr(param, "type", None)
        choices = [str(c) for c in getattr(kind, "choices", None) or ()] or None
        label = getattr(kind, "name", "") or ""
    bounds = param if hasattr(param, "display_type") else getattr(param, "type", None)  # Typer keeps them on the param
    low, high = getattr(bounds, "min", None), getattr(bounds, "max", None)
    text = "one of " + ", ".join(f"`{c}`" for c in choices) if choices else f"`{label}`" if label else ""
    if low is not None and high is not None:
        text += f", {low} to {high}"
    elif low is not None:
        text += f", at least {low}"
    elif high is not None:
        text += f", at most {high}"
    return text


def _value(value: Any) -> str:
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, (list, tuple)):
        return ", ".join(_value(v) for v in value)
    if callable(value):
        return "(dynamic)"
    return str(value)


def _default(param: Any, ctx: Any) -> str:
    if getattr(param, "required", False):
        return "required"
    shown = getattr(param, "show_default", None)
    if isinstance(shown, str):
        return _cell(shown)
    if shown is False:
        return ""
    resilient, ctx.resilient_parsing = ctx.resilient_parsing, True
    try:
        value = param.get_default(ctx, call=False)
    finally:
        ctx.resilient_parsing = resilient
    if _is_option(param) and getattr(param, "is_flag", False):
        if param.secondary_opts:  # --x / --no-x: name the one that is in force
            return f"`{(param.opts if value else param.secondary_opts)[0]}`"
        return "on" if value else ""
    if value is None or type(value) is object or value == () or value == []:  # object(): Click's "no default" sentinel
        return ""
    return f"`{_value(value)}`"


def _params(command: Any, ctx: Any) -> list[Any]:
    help_option = command.get_help_option(ctx) if hasattr(command, "get_help_option") else None
    help_names = set(getattr(help_option, "opts", ()))
    return [p for p in command.get_params(ctx)
            if not getattr(p, "hidden", False) and p is not help_option
            and not (_is_option(p) and p.opts and set(p.opts) <= help_names)]


def _subcommands(command: Any, ctx: Any) -> list[tuple[str, Any]]:
    if not hasattr(command, "list_commands"):
        return []
    found = [(name, command.get_command(ctx, name)) for name in command.list_commands(ctx)]
    return [(name, sub) for name, sub in found if sub is not None and not getattr(sub, "hidden", False)]


def _summary(command: Any) -> str:
    text = (command.short_help or inspect.cleandoc(command.help or "").split("\f", 1)[0]).strip()
    first = re.split(r"\n\s*\n", text, maxsplit=1)[0]
    return _cell(first)


def _section(command: Any, ctx: Any, level: int) -> list[str]:
    """A command's usage, help and parameters; then its subcommands, one level deeper. The root
    command (level 1) is the page itself, so it gets no heading of its own."""
    lines = [f"{'#' * level} {ctx.command_path}", ""] if level > 1 else []
    if getattr(command, "deprecated", False):
        lines += ["*Deprecated.*", ""]
    lines += ["```text", command.get_usage(ctx).rstrip(), "```", ""]
    help_text = _help_text(command.help)
    if help_text:
        lines += [help_text, ""]
    params = _params(command, ctx)
    if params:
        lines += ["| argument or option | type | default | description |", "|---|---|---|---|"]
        for param in params:
            lines.append(f"| {_names(param)} | {_type(param, ctx)} | {_default(param, ctx)} "
                         f"| {_cell(getattr(param, 'help', None) or '')} |")
        lines.append("")
    subcommands = _subcommands(command, ctx)
    if subcommands:
        lines += _command_table(subcommands, ctx)
    for name, sub in subcommands:
        lines += _section(sub, _context(sub, name, ctx), level + 1)
    return lines


def _command_table(subcommands: list[tuple[str, Any]], ctx: Any) -> list[str]:
    lines = ["| command | what it does |", "|---|---|"]
    for name, sub in subcommands:
        path = f"{ctx.command_path} {name}"
        anchor = re.sub(r"[^\w\- ]", "", path.lower()).strip().replace(" ", "-")
        lines.append(f"| [`{path}`](#{anchor}) | {_summary(sub)} |")
    return lines + [""]


def render() -> str:
    """The CLI reference page, from `vitexport.cli.app`."""
    import typer

    from vitexport.cli import app

    command = typer.main.get_command(app)
    lines = [HEADER] + _section(command, _context(command, PROG), 1)
    return "\n".join(lines).rstrip("\n") + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write the CLI reference page from the Typer app.")
    parser.add_argument("--check", action="store_true",
                        help=f"exit 1 when {TARGET.relative_to(DOCS.parent)} is out of date, write nothing")
    args = parser.parse_args(argv)
    root = str(DOCS.parent)
    if root not in sys.path:  # run from a checkout without an install
        sys.path.insert(0, root)
    text = render()
    shown = TARGET.relative_to(DOCS.parent).as_posix()
    if args.check:
        current = TARGET.read_text(encoding="utf-8") if TARGET.is_file() else None
        if current != text:
            print(f"{shown} is out of date: regenerate it with `{REGENERATE}`", file=sys.stderr)
            return 1
        return 0
    TARGET.parent.mkdir(parents=True, exist_ok=True)
    TARGET.write_text(text, encoding="utf-8", newline="\n")
    print(f"wrote {shown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
