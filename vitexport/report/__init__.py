"""Showing results: a bench report's columns and tables (tables.py), its files (files.py: JSON, CSV,
Markdown; plots.py: the PNG), the sentences that explain it (prose.py), reports from several
machines merged and ranked (merge.py), short names for machines and devices (names.py), rows timed
on a device in words (devices.py), everything people read on the terminal (terminal.py), and what a
Jupyter notebook shows of the API's results, progress and errors (notebook.py, notebook_views.py).

May import core, models, verify, vitexport.backends (the registry) and vitexport.backends.base,
export and bench; never deploy, matrix, optimize, doctor, a backend plug-in, api or cli (they
import it). Reading a stored bench report back is bench's job (vitexport.bench.stored).
"""
