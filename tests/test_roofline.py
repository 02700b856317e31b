import pytest

from vitexport.roofline import _matmul_model, fraction_of_roofline, gemm_rate


def test_gemm_rate_is_measured_with_onnxruntime():
    rate = gemm_rate(n=128, threads=1, seconds=0.05)
    assert rate["n"] == 128 and rate["gflops"] > 0 and rate["runs"] >= 3 and rate["threads"] == 1
    assert rate["gflops"] >= rate["gflops_median"]  # the fastest run is at least as fast as the median


def test_the_graph_loads_in_onnxruntime():
    import onnx

    model = onnx.load_from_string(_matmul_model(8))
    onnx.checker.check_model(model)
    assert model.ir_version == 10 and [n.op_type for n in model.graph.node] == ["MatMul"]


def test_fraction_of_roofline():
    # 35.1 GFLOP per image at 5 images/s on a 175.5 GFLOP/s machine uses exactly all of it.
    assert fraction_of_roofline(35.1, 5.0, 175.5) == pytest.approx(1.0)
    assert fraction_of_roofline(None, 5.0, 175.5) is None and fraction_of_roofline(35.1, 5.0, 0.0) is None
