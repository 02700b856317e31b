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


def test_each_row_is_compared_with_the_processor_it_ran_on():
    from vitexport.roofline import attach_fractions, basis

    assert [basis(p) for p in ("CPUExecutionProvider", "torch-cpu", "torchscript-cpu", "torch-cuda",
                               "CUDAExecutionProvider", "TensorrtExecutionProvider", "coreml", None)] == \
        ["cpu", "cpu", "cpu", "cuda", "cuda", "cuda", None, None]
    rows = [{"available": True, "provider": "torch-cpu", "throughput_ips": 2.0},
            {"available": True, "provider": "torch-cuda", "throughput_ips": 200.0},
            {"available": False, "provider": None}]
    attach_fractions({"roofline": {"gflops": 100.0}, "roofline_cuda": None, "results": rows}, 10.0)
    assert rows[0]["roofline_fraction"] == pytest.approx(0.2) and rows[0]["roofline_basis"] == "cpu"
    assert rows[1]["roofline_fraction"] is None and rows[1]["roofline_basis"] == "cuda"  # no GPU rate measured
    assert "roofline_fraction" not in rows[2]
    attach_fractions({"roofline": {"gflops": 100.0}, "roofline_cuda": {"gflops": 4000.0}, "results": rows}, 10.0)
    assert rows[1]["roofline_fraction"] == pytest.approx(0.5)


@pytest.mark.gpu
@pytest.mark.skipif("not __import__('torch').cuda.is_available()", reason="needs a CUDA device")
def test_cuda_gemm_rate():
    from vitexport.roofline import cuda_gemm_rate

    rate = cuda_gemm_rate(n=1024, seconds=0.05)
    assert rate["gflops"] > 0 and rate["runs"] >= 3 and rate["provider"] == "torch-cuda"
