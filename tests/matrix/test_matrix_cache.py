"""The matrix cache trusts a timing record only while its numbers are data: a record whose rows hold
NaN, infinite, negative or absurd latencies is damaged like an unreadable one, and the timing is redone."""

import json

import pytest

from vitexport.matrix.cache import Cache


def row(p50):
    return {"backend": "onnxruntime", "batch_size": 1, "precision": "fp32", "available": True,
            "latency_ms": {"mean": 10.0, "std": 0.1, "min": 9.0, "max": 11.0, "p50": p50, "p90": 10.5, "p99": 11.0},
            "throughput_ips": 100.0}


def test_a_sound_timing_record_is_a_hit(tmp_path):
    cache = Cache(tmp_path)
    cache.put("timing", "k1", {"status": "timed", "rows": [row(10.0)]})
    assert cache.get("timing", "k1")["rows"][0]["latency_ms"]["p50"] == 10.0


@pytest.mark.parametrize("p50", [float("nan"), float("inf"), -1.0, 1e12])
def test_a_timing_record_with_numbers_that_are_not_data_is_redone(tmp_path, p50):
    cache = Cache(tmp_path)
    path = cache.put("timing", "k1", {"status": "timed", "rows": [row(10.0)]})
    record = json.loads(path.read_text())
    record["rows"][0]["latency_ms"]["p50"] = p50
    path.write_text(json.dumps(record))  # NaN and Infinity tokens, as a hand edit would leave them
    assert cache.get("timing", "k1") is None
