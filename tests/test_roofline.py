import pytest

from vitexport.roofline import fraction_of_roofline, gemm_rate


def test_gemm_rate_is_measured_with_onnxruntime():
    rate = gemm_rate(n=128, threads=1, seconds=0.05)
    assert rate["n"] == 128 and rate["gflops"] > 0 and rate["runs"] >= 1


def test_fraction_of_roofline():
    # 35.1 GFLOP per image at 5 images/s on a 175.5 GFLOP/s machine uses exactly all of it.
    assert fraction_of_roofline(35.1, 5.0, 175.5) == pytest.approx(1.0)
