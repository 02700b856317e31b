"""`vitexport matrix`: models × targets × devices, each cell exported, verified and timed through the
same pipeline as the single commands, cached by what it depends on, run on this machine or on Ray.

    plan.py     the TOML plan, checked whole before any work
    plan_values.py  reading and checking single plan values
    keys.py     what a cell depends on: its cache key
    cache.py    cell records, written atomically, trusted only while their artifact is intact
    cells.py    one export or timing (wherever it runs), artifacts as bytes
    run.py      the run: cache, pool, progress, exit code
    local.py    the local pool of worker processes (worker.py)
    ray_pool.py the Ray pool (`vitexport[ray]`), imported only with --ray
    ray_driver.py   that pool in a process of its own, so a crash inside Ray cannot take the run with it
    merged.py   the merged report
    show.py     the terminal summary

Nothing here is imported by `vitexport --help`.

May import: core, models, verify, the backend spec, export, bench, report."""
