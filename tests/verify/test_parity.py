import numpy as np
import pytest

from vitexport.verify.parity import TOLERANCES, compare, metrics, tolerance_for

FP32 = TOLERANCES["fp32"]


def logits(seed=0, shape=(3, 10)):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def test_identical_outputs_pass_with_zero_error():
    m = metrics(logits(), logits(), FP32)
    assert m["passed"] and m["max_abs_error"] == 0 and m["cosine_similarity"] == pytest.approx(1.0)


def test_float32_rounding_noise_passes():
    ref = logits()
    cand = ref + np.float32(1e-6) * np.sign(ref)
    assert metrics(ref, cand, FP32)["passed"]


def test_a_shifted_logit_fails_with_a_reason():
    ref = logits()
    cand = ref.copy()
    cand[0, 3] += 0.01
    m = metrics(ref, cand, FP32)
    assert not m["passed"] and "exceeds atol" in m["reason"]
    assert m["max_abs_error"] == pytest.approx(0.01, rel=1e-3)


def test_top1_agreement_counts_rows():
    ref = np.array([[0, 1.0], [1.0, 0], [0, 1.0]])
    cand = np.array([[0, 1.0], [0, 1.0], [0, 1.0]])
    assert metrics(ref, cand, FP32)["top1_agreement"] == pytest.approx(2 / 3)


def test_fp16_noise_fails_fp32_but_passes_fp16():
    ref = logits(shape=(1, 1000))
    cand = ref.astype(np.float16).astype(np.float32) + np.float32(2e-3)
    assert not metrics(ref, cand, FP32)["passed"]
    assert metrics(ref, cand, TOLERANCES["fp16"])["passed"]


def test_constant_reference_is_never_a_pass():
    ref = np.zeros((1, 10), np.float32)
    m = metrics(ref, ref.copy(), FP32)
    assert not m["passed"] and "constant" in m["reason"]


def test_nan_in_candidate_fails():
    ref = logits()
    cand = ref.copy()
    cand[1, 1] = np.nan
    assert not metrics(ref, cand, FP32)["passed"]


def test_shape_mismatch_fails():
    assert not metrics(logits(shape=(1, 10)), logits(shape=(1, 9)), FP32)["passed"]


def test_compare_reports_the_worst_case_over_batches():
    ref1, ref3 = logits(1, (1, 10)), logits(3, (3, 10))
    bad3 = ref3.copy()
    bad3[2, 0] += 1.0
    report = compare([(1, "random", {"logits": ref1}, {"logits": ref1}),
                      (3, "random", {"logits": ref3}, {"logits": bad3})], FP32, "fp32")
    assert not report.passed
    assert report.summary["max_abs_error"] == pytest.approx(1.0, rel=1e-6)
    assert report.batches == [1, 3]
    assert report.failures and report.failures[0].startswith("random batch 3 logits")


def test_missing_output_fails():
    report = compare([(1, "random", {"logits": logits()}, {})], FP32, "fp32")
    assert not report.passed


def test_overrides_keep_the_precision_default_for_what_is_not_given():
    tol = tolerance_for("fp16", atol=1e-3)
    assert tol.atol == 1e-3 and tol.rtol == TOLERANCES["fp16"].rtol


def test_top5_and_kl_notice_a_reordered_tail():
    ref = np.array([[10.0, 9, 8, 7, 6, 0, -1]])
    cand = np.array([[10.0, 9, 8, 7, -5, 6, -1]])  # fifth class swapped out
    m = metrics(ref, cand, FP32)
    assert m["top1_agreement"] == 1.0 and m["top5_agreement"] == pytest.approx(0.8)
    assert m["softmax_kl"] > 0 and metrics(ref, ref, FP32)["softmax_kl"] == pytest.approx(0.0, abs=1e-12)


def test_p99_relative_error_ignores_near_zero_references():
    ref = np.array([[1.0, 2.0, 1e-12, 4.0]])
    cand = ref + np.array([[1e-5, 0, 1e-5, 0]])
    assert metrics(ref, cand, FP32)["p99_relative_error"] < 0.2
