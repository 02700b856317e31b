"""The matrix's terminal summary reads down its columns: one precision per column."""

import re

from vitexport.matrix.show import summary


def test_numbers_in_a_column_share_their_precision(capsys):
    best = [{"target": "onnx int8", "bench_target": "onnxruntime", "p50_ms": p50, "throughput_ips": ips,
             "cosine_similarity": 0.9991} for p50, ips in ((26.95, 37.1), (98.2399, 81.456), (1234.5, 0.81))]
    merged = {"files": {"json": "m.json"},
              "matrix": {"name": "plan", "cells": [], "counts": {"passed": 3},
                         "cached": {"exports_run": 3, "exports": 0, "timings_run": 3, "timings": 0},
                         "fastest": [{"model": f"m{i}", "device": "local", "batch": 1, "best": b, "candidates": 2}
                                     for i, b in enumerate(best)]}}
    summary(merged)
    cells = [[c.strip() for c in re.split(r"[│|]", line)[1:-1]] for line in capsys.readouterr().out.splitlines()
             if re.match(r"\s*[│|]\s*m\d ", line)]
    assert [c[5] for c in cells] == ["37.1", "81.5", "0.8"]  # img/s
    assert [c[4] for c in cells] == ["26.95", "98.24", "1234.50"]  # p50 ms
