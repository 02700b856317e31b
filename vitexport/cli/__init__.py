"""The command line: a thin Typer layer that parses flags into typed options, calls the library,
renders what it returns and maps its exceptions to exit codes.

May import every other part of vitexport; nothing imports it (backends least of all)."""

from vitexport.cli.app import app, main

__all__ = ["app", "main"]
