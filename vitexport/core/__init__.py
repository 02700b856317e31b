"""The core every part of vitexport may import, and which imports no other part: the version, the
exceptions and their exit codes (errors), typed options (options), progress reporting (progress),
what this machine is and has and how files are written (environment), bounded reading of JSON a user
hands us (jsonfile), signals that end a run like Ctrl-C (termination), and the timing loop (timing).

May import: nothing else of vitexport. Pure standard library at import time (`vitexport --help`
and the benchmark workers start without numpy or torch)."""

__version__ = "0.1.0"
