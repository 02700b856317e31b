"""The consoles vitexport prints through, and how a table is printed whole: one place that decides
how text reaches a terminal, a pipe or a log."""

from __future__ import annotations


def escape(text: str) -> str:
    """Messages hold things like `vitexport[coreml]` that rich would read as markup."""
    from rich.markup import escape as rich_escape

    return rich_escape(text)


def new_console(*, stderr: bool = False, width: int | None = None):
    """Every console vitexport prints through. Text is shown as written: no `:name:` becomes an emoji
    (`androidx.test:runner:1.6.2` stays whole) and, off a terminal (a pipe, a CI log), prose is never
    hard-wrapped at 80 columns. stderr is vitexport's own, the real one also while libraries' output
    is held back."""
    from rich.console import Console

    from vitexport.core import chatter

    out = Console(file=chatter.stderr() if stderr else None, width=width, emoji=False)
    out.soft_wrap = not out.is_terminal
    return out


def stderr_console():
    return new_console(stderr=True)


def wide_console():
    """Benchmark tables have many numeric columns: never squeeze them below 110 columns."""
    import shutil

    return new_console(width=max(shutil.get_terminal_size((110, 24)).columns, 110))


def print_table(console, table) -> None:
    """Print a table with every cell whole: rich would cut a number that does not fit to "15…". In a
    pipe or a log the table gets the width it needs (nothing there wraps lines); on a terminal too
    narrow for it, the rightmost columns are left out and named, so what is shown stays true."""
    natural = console.measure(table, options=console.options.update_width(100_000)).maximum
    if natural <= console.width:
        console.print(table)
        return
    if not console.is_terminal:
        width = console.width
        console.width = natural
        try:
            console.print(table)
        finally:
            console.width = width
        return
    columns, left_out = list(table.columns), []
    while len(table.columns) > 1 and console.measure(
            table, options=console.options.update_width(100_000)).maximum > console.width:
        left_out.insert(0, table.columns.pop())
    console.print(table)
    table.columns = columns
    names = ", ".join(str(c.header) for c in left_out)
    console.print(f"[dim](not shown for lack of width: {escape(names)}; widen the terminal or use --json)[/dim]",
                  highlight=False)
