"""Timing artifacts and saying honestly how fast they are: `bench()` from the request to the report
(run), the workers of one run from the first load to the last verdict (session), one persistent
process per row (worker), short alternating rounds (rounds), what the timed process measures around
the timing loop (measure), the statistics behind every verdict (stats), `--batch auto` (sweep), the
machine's state while it ran (conditions, fingerprint), its matrix rate (roofline), the regression
gates (regression), stored reports read back (stored), and where a row's time goes by its
runtime's profiler (profile, opclasses).

May import: core, models, verify, the backend spec, export. Never report: the report is made from
what this room returns."""
