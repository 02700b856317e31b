"""Older spellings of flags, still taken for now: each is rewritten to today's before Typer parses
the command line, with a one-line notice that names the new spelling. One table, so that a renamed
flag keeps working in one place and leaves it in one place."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class OldSpelling:
    command: str
    flag: str  # the old flag, which took a value
    new: str  # the flag that takes the value now
    notice: str
    json_path: bool = False  # the value is a .json path (bench's --json still is, alone, today's flag)

    def matches(self, value: str) -> bool:
        return not value.startswith("-") and (not self.json_path or value.lower().endswith(".json"))


OLD_SPELLINGS = (
    OldSpelling("bench", "--json", "--json-path",
                "`bench --json PATH` is now `bench --json`, which prints the report on stdout as every other "
                "command does (bench also writes it into --out); PATH is written as before this time",
                json_path=True),
    OldSpelling("coreml", "--batch-sizes", "--batch", "`--batch-sizes` is now `--batch`, as in bench and optimize"),
    OldSpelling("tensorrt", "--batch-buckets", "--batch", "`--batch-buckets` is now `--batch`, as in bench and "
                                                          "optimize"),
)


def modernised(argv: list[str]) -> tuple[list[str], list[str]]:
    """`argv` (without the program name) in today's spelling, and the notices for what was rewritten."""
    if not argv:
        return argv, []
    out, notices, i = [argv[0]], [], 1
    rules = [r for r in OLD_SPELLINGS if r.command == argv[0]]
    while i < len(argv):
        arg = argv[i]
        if arg == "--":  # everything after it is positional
            out += argv[i:]
            break
        rule = next((r for r in rules if arg == r.flag and i + 1 < len(argv) and r.matches(argv[i + 1])), None) \
            or next((r for r in rules if arg.startswith(r.flag + "=") and r.matches(arg.split("=", 1)[1])), None)
        if rule is None:
            out.append(arg)
            i += 1
            continue
        value = argv[i + 1] if arg == rule.flag else arg.split("=", 1)[1]
        out += [rule.new, value]
        notices.append(f"notice: {rule.notice}")
        i += 2 if arg == rule.flag else 1
    return out, notices
