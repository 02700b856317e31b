"""TensorRT: option rules, the API adapter across generations, fp16/int8 ONNX rewriting, runtime checks,
and real engine builds through TensorRT-RTX (no GPU needed to build)."""

import json
import types
from pathlib import Path

import numpy as np
import pytest
from zoo_models import ZOO, zoo_spec

from vitexport import api
from vitexport.backends.tensorrt import generations as trt_api
from vitexport.backends.tensorrt.options import TensorRTOptions, validate
from vitexport.core.errors import BackendUnavailable, ExitCode, RuntimeFailure, UsageError
from vitexport.models.sources import SourceSpec, artifact_stem

# --- option rules ------------------------------------------------------------------------------------


@pytest.mark.parametrize("kwargs,message", [
    ({"min_batch": 4, "opt_batch": 2, "max_batch": 8}, "min <= opt <= max"),
    ({"min_batch": 1, "opt_batch": 9, "max_batch": 8}, "min <= opt <= max"),
    ({"min_batch": 0}, "--min-batch must be >= 1"),
    ({"max_batch": 8, "opt_batch": 8, "batch_buckets": (4, 2, 8)}, "rise strictly"),
    ({"max_batch": 8, "opt_batch": 8, "batch_buckets": (2, 4)}, "end at the max batch"),
    ({"min_batch": 2, "max_batch": 8, "opt_batch": 8, "batch_buckets": (1, 8)}, "rise strictly from the min"),
    ({"dla_core": 0, "precision": "fp16", "max_batch": 4, "opt_batch": 4}, "DLA needs static shapes"),
    ({"dla_core": 0, "precision": "fp32"}, "DLA runs fp16 or int8 only"),
    ({"dla_core": -1, "precision": "fp16"}, "must be >= 0"),
    ({"dla_core": 0, "precision": "fp16", "hardware_compatibility": "ampere_plus"}, "cannot use DLA"),
    ({"precision": "int4"}, "precision must be one of"),
    ({"precision": "int8"}, "needs calibration images"),
    ({"builder": "onnx"}, "--builder must be"),
    ({"optimization_level": 7}, "--optimization-level must be <= 5"),
    ({"workspace_mb": 0}, "--workspace-mb must be >= 1"),
    ({"hardware_compatibility": "everything"}, "ampere_plus"),
    ({"rtx_targets": ("SM90",)}, "--rtx-targets must be one of"),
    ({"rtx_targets": ("CURRENT", "SM89")}, "cannot be combined"),
])
def test_invalid_options_are_refused_before_building(kwargs, message):
    with pytest.raises(UsageError, match=message) as caught:
        validate(TensorRTOptions(**kwargs))
    assert caught.value.exit_code == ExitCode.USAGE and "\n" not in str(caught.value)


def test_int8_needs_no_images_when_the_ranges_are_settled():
    validate(TensorRTOptions(precision="int8"), calibrated=True)


def test_profiles_one_per_bucket():
    options = TensorRTOptions(min_batch=1, opt_batch=8, max_batch=8, batch_buckets=(1, 4, 8))
    assert options.profiles() == [(1, 1, 1), (2, 4, 4), (5, 8, 8)] and options.dynamic
    assert TensorRTOptions().profiles() == [(1, 1, 1)] and not TensorRTOptions().dynamic


def test_fp32_layers_are_op_types_or_name_patterns():
    options = TensorRTOptions(fp32_layers=("Softmax", "*/ln_1/*"))
    assert options.keeps_fp32("Softmax", "/encoder/x/Softmax")
    assert options.keeps_fp32("ReduceMean", "/encoder/layers/encoder_layer_0/ln_1/ReduceMean")
    assert not options.keeps_fp32("LayerNormalization", "/encoder/layers/encoder_layer_0/ln_2/LayerNormalization")
    assert not TensorRTOptions(fp32_layers=("Soft",)).keeps_fp32("Softmax", "Softmax_3")  # op types match exactly


# --- the adapter against each API generation ---------------------------------------------------------


class FakeEnum:
    """A pybind11-style enum class: members as attributes and in __members__."""

    def __init_subclass__(cls, **kwargs):
        cls.__members__ = {k: v for k, v in vars(cls).items() if k.isupper()}


def fake_trt(generation: str) -> trt_api.Trt:
    """A module exposing the names one TensorRT generation has (and lacking those it lacks)."""
    old = generation == "8.2"
    weak = generation in ("8.2", "8.6", "10")
    flags = {"FP16": 0, "INT8": 1, "OBEY_PRECISION_CONSTRAINTS": 6} if weak else {}
    flags.update({} if old else {"VERSION_COMPATIBLE": 5})
    net_flags = {"EXPLICIT_BATCH": 0} if generation in ("8.2", "8.6", "10") else {}
    net_flags.update({} if generation in ("8.2", "8.6") else {"STRONGLY_TYPED": 1})
    module = types.SimpleNamespace(
        __version__={"8.2": "8.2.1", "8.6": "8.6.2", "10": "10.3.0", "11": "11.0.0", "rtx": "1.7.1"}[generation],
        BuilderFlag=type("BuilderFlag", (FakeEnum,), {**flags, "TF32": 2, "GPU_FALLBACK": 3}),
        NetworkDefinitionCreationFlag=type("NetFlag", (FakeEnum,), net_flags),
        MemoryPoolType=types.SimpleNamespace(WORKSPACE="ws"),
        DeviceType=types.SimpleNamespace(GPU=0, DLA=1),
        IBuilderConfig=type("IBuilderConfig", (), {} if old else {"builder_optimization_level": 3}),
    )
    if weak:
        module.IInt8EntropyCalibrator2 = object
    if not old:
        module.HardwareCompatibilityLevel = types.SimpleNamespace(AMPERE_PLUS=1, SAME_COMPUTE_CAPABILITY=2)
    if generation == "rtx":
        module.ComputeCapability = types.SimpleNamespace(SM86=86, SM89=89, CURRENT=1)
    return trt_api.Trt(module, "rtx" if generation == "rtx" else "tensorrt", module.__version__)


@pytest.mark.parametrize("generation,typed,net_weak,net_strong,calibrators", [
    ("8.6", False, 1 << 0, 1 << 0, True),  # JetPack 5/6.0: explicit batch flag still needed, no STRONGLY_TYPED
    ("10", False, 0, 1 << 1, True),  # explicit batch implied; strongly typed on request
    ("11", True, 0, 1 << 1, False),  # no precision flags: strongly typed, no calibrators
    ("rtx", True, 0, 1 << 1, False),
])
def test_adapter_follows_each_generation(generation, typed, net_weak, net_strong, calibrators):
    trt = fake_trt(generation)
    assert trt.strongly_typed is typed and trt.precision_flags is not typed
    assert trt.has_calibrators is calibrators
    assert trt_api.network_flags(trt, strongly_typed=False) == net_weak
    assert trt_api.network_flags(trt, strongly_typed=True) == net_strong
    assert trt.has_dla is (generation != "rtx")  # RTX GPUs have no DLA, whatever the enum says
    assert trt.has_compute_targets is (generation == "rtx")


def test_workspace_uses_memory_pools_or_the_old_attribute():
    calls = {}
    new = types.SimpleNamespace(set_memory_pool_limit=lambda pool, size: calls.update({pool: size}))
    trt_api.set_workspace(fake_trt("10"), new, 1 << 20)
    assert calls == {"ws": 1 << 20}
    old = types.SimpleNamespace()
    trt_api.set_workspace(fake_trt("8.2"), old, 123)
    assert old.max_workspace_size == 123


@pytest.mark.parametrize("generation,options,message", [
    ("rtx", {"dla_core": 0, "precision": "fp16"}, "no DLA support"),
    ("8.2", {"version_compatible": True}, "version-compatible"),
    ("8.2", {"hardware_compatibility": "ampere_plus"}, "hardware-compatible"),
    ("8.2", {"optimization_level": 3}, "optimisation levels"),
    ("10", {"rtx_targets": ("SM89",)}, "needs the TensorRT-RTX builder"),
])
def test_what_a_generation_lacks_is_refused(generation, options, message):
    with pytest.raises(UsageError, match=message):
        validate(TensorRTOptions(**options), fake_trt(generation))


@pytest.mark.parametrize("generation", ["8.6", "10", "11", "rtx"])
def test_what_a_generation_has_is_accepted(generation):
    validate(TensorRTOptions(version_compatible=generation != "rtx", hardware_compatibility="ampere_plus",
                             optimization_level=2), fake_trt(generation))


def test_rtx_has_no_version_compatible_engines():
    # The flag is in its enum, but the wheel has no lean runtime to embed (the build would fail late).
    with pytest.raises(UsageError, match="version-compatible"):
        validate(TensorRTOptions(version_compatible=True), fake_trt("rtx"))


class Recorder:
    def __init__(self, **attrs):
        self.calls = []
        self.__dict__.update(attrs)

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)

        def call(*args):
            self.calls.append((name, args))
            return True
        return call


def name_based_engine():
    shapes = {"pixel_values": (-1, 3, 32, 32), "logits": (-1, 10)}
    return types.SimpleNamespace(
        num_io_tensors=2, get_tensor_name=lambda i: list(shapes)[i],
        get_tensor_mode=lambda n: "TensorIOMode.INPUT" if n == "pixel_values" else "TensorIOMode.OUTPUT",
        get_tensor_shape=lambda n: shapes[n], get_tensor_dtype=lambda n: "DataType.FLOAT")


def binding_engine():
    names = ["pixel_values", "logits"]
    return types.SimpleNamespace(
        num_bindings=4, num_optimization_profiles=2, get_binding_name=lambda i: (names * 2)[i],
        binding_is_input=lambda i: i % 2 == 0, get_binding_shape=lambda i: [(-1, 3, 32, 32), (-1, 10)][i % 2],
        get_binding_dtype=lambda i: "DataType.HALF", get_binding_index=lambda n: names.index(n))


def test_io_tensors_from_either_engine_api_and_from_a_network():
    expected = [{"name": "pixel_values", "mode": "input", "shape": [-1, 3, 32, 32], "dtype": "FLOAT"},
                {"name": "logits", "mode": "output", "shape": [-1, 10], "dtype": "FLOAT"}]
    assert trt_api.io_tensors(name_based_engine()) == expected
    old = trt_api.io_tensors(binding_engine())  # one entry per tensor, not per profile
    assert [t["name"] for t in old] == ["pixel_values", "logits"] and old[0]["dtype"] == "HALF"
    tensor = lambda name, shape: types.SimpleNamespace(name=name, shape=shape, dtype="DataType.FLOAT")  # noqa: E731
    network = types.SimpleNamespace(num_inputs=1, num_outputs=1,
                                    get_input=lambda i: tensor("pixel_values", (-1, 3, 32, 32)),
                                    get_output=lambda i: tensor("logits", (-1, 10)))
    assert trt_api.io_tensors(network) == expected


def test_an_output_shape_the_onnx_leaves_unknown_may_be_resolved_by_the_engine(tmp_path):
    """The legacy exporter declares a transformers encoder's last_hidden_state [-1, -1, -1]; the engine
    works out [-1, 17, 32]. An input, or a dimension the ONNX fixes, must still match exactly."""
    import onnx
    from onnx import TensorProto, helper

    from vitexport.backends.tensorrt.iocheck import io_differences

    graph = helper.make_graph(
        [helper.make_node("Identity", ["pixel_values"], ["hidden"]), helper.make_node("Identity", ["pixel_values"],
                                                                                      ["pooled"])],
        "g", [helper.make_tensor_value_info("pixel_values", TensorProto.FLOAT, ["batch", 17, 32])],
        [helper.make_tensor_value_info("hidden", TensorProto.FLOAT, [None, None, None]),
         helper.make_tensor_value_info("pooled", TensorProto.FLOAT, ["batch", 17, 32])])
    path = tmp_path / "io.onnx"
    onnx.save(helper.make_model(graph), str(path))
    io = lambda name, mode, shape: {"name": name, "mode": mode, "shape": shape, "dtype": "FLOAT"}  # noqa: E731
    engine = [io("pixel_values", "input", [-1, 17, 32]), io("hidden", "output", [-1, 17, 32]),
              io("pooled", "output", [-1, 17, 32])]
    assert io_differences(path, engine) == []
    engine[0]["shape"], engine[2]["shape"] = [8, 17, 32], [-1, 17, 16]
    assert io_differences(path, engine) == ["pixel_values: shape [8, 17, 32] in the engine, [-1, 17, 32] in the ONNX",
                                            "pooled: shape [-1, 17, 16] in the engine, [-1, 17, 32] in the ONNX"]


def test_execute_by_name_or_by_binding_slots():
    v3_context = Recorder()  # records set_tensor_address calls
    v3_context.execute_async_v3 = lambda stream: v3_context.calls.append(("execute_async_v3", (stream,))) or True
    trt_api.execute(v3_context, name_based_engine(), {"pixel_values": 10, "logits": 20}, 7)
    assert ("set_tensor_address", ("pixel_values", 10)) in v3_context.calls
    assert v3_context.calls[-1] == ("execute_async_v3", (7,))

    old_context = types.SimpleNamespace(
        execute_async_v2=lambda bindings, stream: seen.append((bindings, stream)) or True)
    seen = []
    trt_api.execute(old_context, binding_engine(), {"pixel_values": 10, "logits": 20}, 7)
    assert seen == [([10, 20, 10, 20], 7)]

    failing = types.SimpleNamespace(execute_async_v3=lambda s: False, set_tensor_address=lambda n, p: True)
    with pytest.raises(RuntimeFailure, match="failed to enqueue"):
        trt_api.execute(failing, name_based_engine(), {}, 0)


def test_input_shapes_and_profiles_by_name_or_binding():
    new = Recorder()
    new.set_input_shape = lambda name, shape: new.calls.append(("set_input_shape", (name, shape))) or True
    new.set_optimization_profile_async = lambda i, s: new.calls.append(("profile", (i, s)))
    trt_api.set_input_shape(new, None, "pixel_values", (2, 3, 32, 32))
    trt_api.select_profile(new, 1, 5)
    assert new.calls == [("set_input_shape", ("pixel_values", (2, 3, 32, 32))), ("profile", (1, 5))]
    old = types.SimpleNamespace(set_binding_shape=lambda i, shape: seen.append((i, shape)) or True)
    seen = []
    trt_api.set_input_shape(old, binding_engine(), "pixel_values", (2, 3, 32, 32))
    trt_api.select_profile(old, 1, 5)
    assert seen == [(0, (2, 3, 32, 32))] and old.active_optimization_profile == 1
    refused = types.SimpleNamespace(set_input_shape=lambda n, s: False)
    with pytest.raises(RuntimeFailure, match="outside the engine's profile"):
        trt_api.set_input_shape(refused, None, "pixel_values", (99, 3, 32, 32))
    assert trt_api.numpy_dtype("HALF") == "float16"


def test_missing_tensorrt_is_exit_3(monkeypatch):
    import importlib

    real = importlib.import_module

    def no_trt(name, *args):
        if name in trt_api.FLAVOURS.values():
            raise ImportError(f"No module named {name!r}")
        return real(name, *args)

    monkeypatch.setattr(importlib, "import_module", no_trt)
    with pytest.raises(BackendUnavailable, match="no TensorRT here") as caught:
        trt_api.load("auto")
    assert caught.value.exit_code == ExitCode.UNAVAILABLE


class FakeLayer:
    def __init__(self, name, kind):
        self.name, self.type, self.precision, self.num_outputs, self.output_types = name, kind, None, 1, {}

    def set_output_type(self, index, dtype):
        self.output_types[index] = dtype


class FakeConfig:
    def __init__(self):
        self.flags, self.profiles, self.calibration_profile = set(), [], None

    def set_flag(self, flag):
        self.flags.add(flag)

    def add_optimization_profile(self, profile):
        self.profiles.append(profile)

    def set_calibration_profile(self, profile):
        self.calibration_profile = profile


def fake_network(layers=(), shape=(-1, 3, 32, 32)):
    tensor = types.SimpleNamespace(name="pixel_values", shape=shape)
    return types.SimpleNamespace(num_layers=len(layers), get_layer=lambda i: layers[i], num_inputs=1,
                                 get_input=lambda i: tensor)


def weak_trt():
    trt = fake_trt("10")
    trt.module.LayerType = types.SimpleNamespace(NORMALIZATION="norm", SOFTMAX="softmax", MATRIX_MULTIPLY="mm")
    trt.module.DataType = types.SimpleNamespace(FLOAT="float")
    return trt


def test_weakly_typed_fp16_pins_fragile_layers_to_fp32(tmp_path):
    from vitexport.backends.tensorrt.build import _precision

    layers = [FakeLayer("/encoder/ln_1/LayerNormalization", "norm"), FakeLayer("/attn/Softmax", "softmax"),
              FakeLayer("/attn/MatMul", "mm"), FakeLayer("/encoder/ln_2/ReduceMean", "reduce")]
    config = FakeConfig()
    trt = weak_trt()
    options = TensorRTOptions(precision="fp16", fp32_layers=("LayerNormalization", "Softmax", "*/ln_2/*"))
    assert _precision(trt, config, fake_network(layers), options, None, False, tmp_path / "e.engine") is None
    flags = trt.module.BuilderFlag
    assert config.flags == {flags.FP16, flags.OBEY_PRECISION_CONSTRAINTS}
    assert [layer.precision for layer in layers] == ["float", "float", None, "float"]  # by type or by name
    assert layers[0].output_types == {0: "float"} and layers[2].output_types == {}


def test_weakly_typed_int8_from_qdq_needs_no_calibrator(tmp_path):
    import torch

    from vitexport.backends.tensorrt.build import _precision

    config, trt = FakeConfig(), weak_trt()
    options = TensorRTOptions(precision="int8", calibration_images="x")
    _precision(trt, config, fake_network(), options, None, True, tmp_path / "e.engine")
    assert trt.module.BuilderFlag.INT8 in config.flags and not hasattr(config, "int8_calibrator")
    if not torch.cuda.is_available():  # implicit quantisation calibrates on the GPU
        with pytest.raises(BackendUnavailable, match="calibration .* runs on the GPU"):
            _precision(trt, FakeConfig(), fake_network(), options, np.zeros((2, 3, 32, 32), np.float32), False,
                       tmp_path / "e.engine")


def test_profiles_per_bucket_and_a_calibration_profile():
    from vitexport.backends.tensorrt.build import _profiles

    made = []

    class Profile:
        def __init__(self):
            self.shapes = {}
            made.append(self)

        def set_shape(self, name, low, opt, high):
            self.shapes[name] = (low, opt, high)

    builder = types.SimpleNamespace(create_optimization_profile=Profile)
    config = FakeConfig()
    options = TensorRTOptions(min_batch=1, opt_batch=8, max_batch=8, batch_buckets=(2, 8))
    _profiles(builder, config, fake_network(), options, calibrating=True)
    assert [p.shapes["pixel_values"] for p in config.profiles] == [
        ((1, 3, 32, 32), (2, 3, 32, 32), (2, 3, 32, 32)), ((3, 3, 32, 32), (8, 3, 32, 32), (8, 3, 32, 32))]
    assert config.calibration_profile.shapes["pixel_values"][0] == (1, 3, 32, 32)
    with pytest.raises(UsageError, match="besides the batch"):
        _profiles(builder, FakeConfig(), fake_network(shape=(-1, 3, -1, -1)), options)


# --- facts, runtime checks, layer report, providers ---------------------------------------------------


def test_jetpack_from_the_tegra_release_file(tmp_path):
    from vitexport.core.environment import jetson_facts

    release = tmp_path / "nv_tegra_release"
    release.write_text("# R36 (release), REVISION: 4.3, GCID: 38968081, BOARD: generic, EABI: aarch64, DATE: x\n")
    assert jetson_facts(release) == {"l4t": "36.4.3", "jetpack": "6"}
    assert jetson_facts(tmp_path / "absent") == {"l4t": None, "jetpack": None}


def test_timing_cache_is_keyed_by_arch_and_version():
    from vitexport.backends.tensorrt.build import timing_cache_path

    path = timing_cache_path("/c", fake_trt("10"), {"compute_capability": "8.7"})
    assert path.name == "timing-tensorrt-10.3.0-sm87.cache"


SIDECAR_INFO = {"flavour": "tensorrt", "tensorrt_version": "10.3.0", "gpu": "Orin", "compute_capability": "8.7",
                "onnx": "vit.onnx", "profiles": [[1, 1, 1]]}


@pytest.mark.parametrize("info,runtime,gpu,message", [
    ({}, "rtx", ("NVIDIA GeForce RTX 4090", "8.9"), "built with TensorRT 10.3.0 but this runtime is TensorRT-RTX"),
    ({}, "11", ("Orin", "8.7"), "built with TensorRT 10.3.0 but 11.0.0 is installed"),
    ({}, "10", None, "needs an NVIDIA GPU"),
    ({}, "10", ("NVIDIA A100", "8.0"), "compute capability 8.7"),
    ({"compute_capability": "8.0", "gpu": "NVIDIA A100-SXM4-80GB"}, "10", ("NVIDIA A100-PCIE-40GB", "8.0"),
     "built on NVIDIA A100-SXM4-80GB"),
    ({"hardware_compatibility": "ampere_plus"}, "10", ("Tesla T4", "7.5"), "Ampere or newer"),
    ({"flavour": "rtx", "tensorrt_version": "1.7.1"}, "rtx", ("NVIDIA H100 80GB HBM3", "9.0"), "targets SM86"),
])
def test_engines_do_not_move_between_runtimes(info, runtime, gpu, message):
    from vitexport.backends.tensorrt.runner import check_runtime

    with pytest.raises(BackendUnavailable, match=message) as caught:
        check_runtime(fake_trt(runtime), {**SIDECAR_INFO, **info}, "/models/vit.onnx", gpu)
    if gpu is not None:
        assert "rebuild from /models/vit.onnx" in str(caught.value)


@pytest.mark.parametrize("info,runtime,gpu", [
    ({}, "10", ("Orin", "8.7")),
    ({"tensorrt_version": "10.1.0", "version_compatible": True}, "10", ("Orin", "8.7")),  # later 10.x loads it
    ({"hardware_compatibility": "ampere_plus"}, "10", ("NVIDIA L4", "8.9")),
    ({"hardware_compatibility": "same_compute_capability"}, "10", ("Jetson AGX Orin", "8.7")),
    ({"flavour": "rtx", "tensorrt_version": "1.7.1"}, "rtx", ("NVIDIA GeForce RTX 4090", "8.9")),
    ({"flavour": "rtx", "tensorrt_version": "1.7.1", "compute_targets": ["SM75"]}, "rtx", ("RTX 2080", "7.5")),
])
def test_matching_runtimes_pass_the_check(info, runtime, gpu):
    from vitexport.backends.tensorrt.runner import check_runtime

    check_runtime(fake_trt(runtime), {**SIDECAR_INFO, **info}, "vit.onnx", gpu)


def test_layer_report_reads_precisions_fusion_and_placement():
    from vitexport.backends.tensorrt.layers import summarize

    detailed = {"Layers": [
        {"Name": "/conv_proj/Conv", "LayerType": "CaskConvolution",
         "Outputs": [{"Format/Datatype": "Row major linear FP16 format"}],
         "TacticName": "sm80_xmma_conv"},
        {"Name": "{ForeignNode[/encoder/layers/encoder_layer_0/self_attention/MatMul.../self_attention/Softmax]}",
         "LayerType": "Myelin", "Outputs": [{"Format/Datatype": "Row major linear FP16 format"}], "TacticName": ""},
        {"Name": "/encoder/ln/LayerNormalization", "LayerType": "Normalization",
         "Outputs": [{"Format/Datatype": "Row major linear FP32"}]},
        {"Name": "dla_subgraph_0", "LayerType": "DLA", "Outputs": [{"Format/Datatype": "Channel major INT8 format"}]},
    ]}
    report = summarize(json.dumps(detailed))
    assert report["layers"] == 4 and report["attention_fused"]
    assert report["precisions"] == {"fp16": 2, "fp32": 1, "int8": 1}
    assert report["placement"] == {"dla": 1, "gpu": 3}
    names_only = summarize(json.dumps({"Layers": ["/x/MatMul", "_gemm_mha_v2_0"]}))
    assert names_only["attention_fused"] and names_only["precisions"] == {"unknown": 2}
    assert not summarize(json.dumps({"Layers": ["/x/MatMul", "/x/Softmax"]}))["attention_fused"]


def test_ort_providers_refuse_or_drop_what_is_missing():
    from vitexport.backends.onnx.providers import check_ran, ort_providers

    cpu_only = ["CPUExecutionProvider"]
    with pytest.raises(BackendUnavailable, match="lacks CUDAExecutionProvider") as caught:
        ort_providers(["cuda"], allow_fallback=False, available=cpu_only)
    assert caught.value.exit_code == ExitCode.UNAVAILABLE
    assert ort_providers(["cuda"], allow_fallback=True, available=cpu_only) == cpu_only
    gpu = ["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"]
    assert ort_providers(["tensorrt", "CUDAExecutionProvider"], False, gpu) == gpu
    session = types.SimpleNamespace(get_providers=lambda: ["CPUExecutionProvider"])
    assert check_ran(session, ["cpu"], allow_fallback=False) == "CPUExecutionProvider"
    with pytest.raises(BackendUnavailable, match="requested but ONNX Runtime runs CPUExecutionProvider"):
        check_ran(session, ["CUDAExecutionProvider"], allow_fallback=False)
    assert check_ran(session, ["CUDAExecutionProvider"], allow_fallback=True) == "CPUExecutionProvider"


def test_ort_providers_against_the_installed_onnxruntime():
    import onnxruntime

    from vitexport.backends.onnx.providers import ort_providers

    assert ort_providers(["cpu"], allow_fallback=False) == ["CPUExecutionProvider"]
    if "CUDAExecutionProvider" not in onnxruntime.get_available_providers():
        with pytest.raises(BackendUnavailable):
            ort_providers(["cuda"], allow_fallback=False)


# --- ONNX rewriting for strongly typed builders ---------------------------------------------------------


@pytest.fixture(scope="module")
def small_vit(tmp_path_factory):
    """A small torchvision ViT exported with a dynamic batch, with its PyTorch logits on a fixed input."""
    import torch
    from torchvision.models.vision_transformer import VisionTransformer

    torch.manual_seed(0)
    model = VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=64, mlp_dim=128,
                              num_classes=10).eval()
    with torch.no_grad():  # torchvision zeroes the head and sets LayerNorm to identity: make them matter
        for name, p in model.named_parameters():
            if "heads" in name or "ln" in name:
                p.copy_(torch.randn_like(p) * (0.5 if name.endswith("bias") or "heads" in name else 1.0) +
                        (1.0 if "ln" in name and name.endswith("weight") else 0.0))
    folder = tmp_path_factory.mktemp("vit")
    path = folder / "vit.onnx"
    x = torch.randn(3, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    torch.onnx.export(model, x[:1], str(path), dynamo=False, opset_version=17, input_names=["pixel_values"],
                      output_names=["logits"], dynamic_axes={"pixel_values": {0: "batch"}, "logits": {0: "batch"}})
    with torch.no_grad():
        logits = model(x).numpy()
    return types.SimpleNamespace(path=path, folder=folder, x=x.numpy(), logits=logits)


def test_fp16_onnx_keeps_layernorm_and_softmax_in_fp32(small_vit, tmp_path):
    import onnx
    from onnx import TensorProto
    from onnx.reference import ReferenceEvaluator

    from vitexport.backends.onnx_common.fp16 import convert_file

    out = tmp_path / "vit.fp16.onnx"
    summary = convert_file(small_vit.path, out, TensorRTOptions(precision="fp16").keeps_fp32)
    model = onnx.shape_inference.infer_shapes(onnx.load(str(out)), strict_mode=True)
    types_ = {v.name: v.type.tensor_type.elem_type for v in (*model.graph.value_info, *model.graph.input,
                                                             *model.graph.output)}
    types_.update({t.name: t.data_type for t in model.graph.initializer})
    kept = [n for n in model.graph.node if n.op_type in ("LayerNormalization", "Softmax")]
    assert len(kept) == 7 and len(summary["kept_fp32"]) == 7  # 2 blocks x (2 LN + Softmax) + final LN
    for node in kept:
        assert {types_[i] for i in node.input if i} == {TensorProto.FLOAT}, node.name
    matmuls = [n for n in model.graph.node if n.op_type in ("MatMul", "Gemm", "Conv")]
    assert matmuls and all(types_[n.input[1]] == TensorProto.FLOAT16 for n in matmuls)
    assert [types_[v.name] for v in (*model.graph.input, *model.graph.output)] == [TensorProto.FLOAT] * 2
    got = ReferenceEvaluator(str(out)).run(None, {"pixel_values": small_vit.x})[0]
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, small_vit.logits, atol=5e-2, rtol=5e-2)


def test_fp16_conversion_handles_constants_and_kept_outputs(tmp_path):
    from onnx import TensorProto, helper, numpy_helper
    from onnx.reference import ReferenceEvaluator

    from vitexport.backends.onnx_common.fp16 import convert

    w = numpy_helper.from_array(np.full((4, 4), 0.5, np.float32), "w")
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
        helper.make_node("Constant", [], ["c"], value_float=1e6, name="big"),  # beyond fp16: clipped, not inf
        helper.make_node("Min", ["h", "c"], ["hc"], name="min"),
        helper.make_node("Shape", ["x"], ["s"], name="shape"),
        helper.make_node("ConstantOfShape", ["s"], ["zeros"], name="zeros"),  # fp32 zero by default
        helper.make_node("Add", ["hc", "zeros"], ["a"], name="add"),
        helper.make_node("Softmax", ["a"], ["y"], name="sm", axis=-1),  # kept, and a graph output
        helper.make_node("Relu", ["a"], ["z"], name="relu"),
    ]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4]),
                               helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 4])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    converted, summary = convert(model, TensorRTOptions(precision="fp16").keeps_fp32)
    assert summary["kept_fp32"] == ["sm"]
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    want = ReferenceEvaluator(model).run(None, {"x": x})
    got = ReferenceEvaluator(converted).run(None, {"x": x})
    for a, b in zip(want, got):
        assert b.dtype == np.float32
        np.testing.assert_allclose(b, a, rtol=1e-3, atol=1e-3)


def test_fp16_conversion_keeps_weights_shared_through_identity_consistent():
    """torch's exporter shares equal weights (LayerNorm's ones) through Identity nodes, or writes them as
    Constant nodes: what only the kept LayerNorm reads stays fp32, what fp16 nodes read becomes fp16."""
    from onnx import TensorProto, helper, numpy_helper
    from onnx.reference import ReferenceEvaluator

    from vitexport.backends.onnx_common.fp16 import convert

    ones = numpy_helper.from_array(np.ones(4, np.float32), "ones")
    nodes = [
        helper.make_node("Identity", ["ones"], ["ln_scale"], name="share_scale"),
        helper.make_node("Constant", [], ["ln_bias"], name="bias", value=numpy_helper.from_array(
            np.full(4, 0.1, np.float32))),
        helper.make_node("Mul", ["x", "ones"], ["m"], name="mul"),
        helper.make_node("LayerNormalization", ["m", "ln_scale", "ln_bias"], ["y"], name="ln", axis=-1),
    ]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])], [ones])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    converted, _ = convert(model, TensorRTOptions(precision="fp16").keeps_fp32)
    assert {t.name: t.data_type for t in converted.graph.initializer} == {"ones": TensorProto.FLOAT16}
    bias = next(n for n in converted.graph.node if n.name == "bias")
    assert bias.attribute[0].t.data_type == TensorProto.FLOAT
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    np.testing.assert_allclose(ReferenceEvaluator(converted).run(None, {"x": x})[0],
                               ReferenceEvaluator(model).run(None, {"x": x})[0], atol=1e-3)


def test_qdq_detection(small_vit, tmp_path):
    from vitexport.backends.onnx_common.quantize import is_qdq, to_qdq_int8

    assert not is_qdq(small_vit.path)
    out = tmp_path / "q.onnx"
    summary = to_qdq_int8(small_vit.path, out, "pixel_values", small_vit.x, TensorRTOptions().keeps_fp32)
    assert is_qdq(out) and summary["excluded_nodes"] == 7


# --- real builds through TensorRT-RTX (no GPU needed) -------------------------------------------------


@pytest.fixture
def rtx():
    pytest.importorskip("tensorrt_rtx_bindings", reason="TensorRT-RTX wheels not installed")
    return trt_api.load("rtx")


def build(small_vit, out: Path, **kwargs):
    from vitexport.backends.tensorrt.build import build_engine

    calibration = kwargs.pop("calibration", None)
    options = TensorRTOptions(builder="rtx", **kwargs)
    return build_engine(small_vit.path, options, out, calibration=calibration)


def test_rtx_engine_io_matches_the_onnx(rtx, small_vit, tmp_path):
    from vitexport.backends.tensorrt.iocheck import io_differences
    from vitexport.core.environment import sha256_file as sha256

    engine = tmp_path / "vit.engine"
    info = build(small_vit, engine, min_batch=1, opt_batch=2, max_batch=4)
    assert engine.stat().st_size == info["engine_bytes"] > 100_000
    assert io_differences(small_vit.path, info["io"]) == []
    assert {t["name"]: (t["mode"], t["shape"], t["dtype"]) for t in info["io"]} == {
        "pixel_values": ("input", [-1, 3, 32, 32], "FLOAT"), "logits": ("output", [-1, 10], "FLOAT")}
    assert info["flavour"] == "rtx" and info["tensorrt_version"] == rtx.version and info["strongly_typed"]
    assert info["profiles"] == [[1, 2, 4]] and info["onnx_sha256"] == sha256(small_vit.path)
    assert info["onnx_path"] == str(small_vit.path.resolve()) and info["built_from"] == "vit.onnx"
    assert info["io_source"] in ("engine", "network") and info["cuda"] == "12"
    assert "SM86" in info["target"] and info["compute_targets"] == []
    assert [p.name for p in tmp_path.iterdir()] == ["vit.engine"]  # no temporary left behind


def test_rtx_fp16_builds_from_a_typed_onnx(rtx, small_vit, tmp_path):
    info = build(small_vit, tmp_path / "vit.engine", precision="fp16", rtx_targets=("SM89",))
    assert info["built_from"] == "vit.fp16.onnx" and (tmp_path / "vit.fp16.onnx").is_file()
    assert len(info["kept_fp32"]) == 7 and info["compute_targets"] == ["SM89"] and "SM89" in info["target"]
    assert info["io"][0]["dtype"] == "FLOAT"  # the caller's contract stays fp32


def test_rtx_int8_builds_from_a_qdq_onnx_calibrated_on_inputs(rtx, small_vit, tmp_path):
    info = build(small_vit, tmp_path / "vit.engine", precision="int8", calibration=small_vit.x)
    assert info["built_from"] == "vit.int8-qdq.onnx" and "QDQ ONNX calibrated on 3" in info["int8_source"]
    with pytest.raises(UsageError, match="int8 needs calibration"):
        build(small_vit, tmp_path / "other.engine", precision="int8", calibration_images="somewhere")


def test_rtx_current_target_needs_a_visible_gpu(rtx, small_vit, tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is visible")
    with pytest.raises(UsageError, match="CURRENT builds for the GPU here"):
        build(small_vit, tmp_path / "vit.engine", rtx_targets=("CURRENT",))


def test_rtx_builds_one_profile_per_bucket(rtx, small_vit, tmp_path):
    info = build(small_vit, tmp_path / "vit.engine", min_batch=1, opt_batch=8, max_batch=8, batch_buckets=(2, 8))
    assert info["profiles"] == [[1, 2, 2], [3, 8, 8]]


def test_fixed_batch_onnx_refuses_a_dynamic_profile(rtx, small_vit, tmp_path):
    import onnx

    model = onnx.load(str(small_vit.path))
    for value in (*model.graph.input, *model.graph.output):
        value.type.tensor_type.shape.dim[0].dim_value = 1
    static = tmp_path / "static.onnx"
    onnx.save(model, str(static))
    from vitexport.backends.tensorrt.build import build_engine

    with pytest.raises(UsageError, match="fixed batch"):
        build_engine(static, TensorRTOptions(builder="rtx", max_batch=4, opt_batch=4), tmp_path / "s.engine")
    assert not (tmp_path / "s.engine").exists()


def test_unreadable_onnx_is_a_usage_error(rtx, tmp_path):
    from vitexport.backends.tensorrt.build import build_engine

    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not an onnx file")
    with pytest.raises(UsageError, match="not a readable ONNX"):
        build_engine(bad, TensorRTOptions(builder="rtx"), tmp_path / "bad.engine")
    assert not (tmp_path / "bad.engine").exists()


@pytest.mark.parametrize("interrupt", [KeyboardInterrupt, RuntimeError])
def test_an_interrupted_build_leaves_nothing_half_written(rtx, small_vit, tmp_path, monkeypatch, interrupt):
    from vitexport.backends.tensorrt import build as build_module
    from vitexport.core.writer import atomic_path

    def write_then_fail(final, data):
        with atomic_path(final) as tmp:
            tmp.write_bytes(data[: len(data) // 2])
            raise interrupt("stopped while writing")

    monkeypatch.setattr(build_module, "write_atomic", write_then_fail)
    with pytest.raises(interrupt):
        build(small_vit, tmp_path / "vit.engine", precision="fp16")
    assert list(tmp_path.iterdir()) == []  # no engine, no temporary, no fp16 ONNX made on the way


def test_loading_on_a_mismatched_runtime_says_rebuild(rtx, small_vit, tmp_path):
    from vitexport.backends.tensorrt.runner import TensorRTRunner

    engine = tmp_path / "vit.engine"
    info = build(small_vit, engine)
    forged = {**info, "tensorrt_version": "0.9.0"}
    with pytest.raises(BackendUnavailable, match=f"rebuild from {small_vit.path.resolve()}") as caught:
        TensorRTRunner(engine, forged).open()
    assert caught.value.exit_code == ExitCode.UNAVAILABLE
    (tmp_path / "vit.onnx").write_bytes(small_vit.path.read_bytes())  # an ONNX beside the engine wins
    with pytest.raises(BackendUnavailable, match=f"rebuild from {tmp_path / 'vit.onnx'}"):
        TensorRTRunner(engine, {**info, "flavour": "tensorrt"}).open()


def test_loading_without_a_gpu_is_exit_3(rtx, small_vit, tmp_path):
    import torch

    from vitexport.backends.tensorrt.runner import TensorRTRunner

    if torch.cuda.is_available():
        pytest.skip("a GPU is visible: the engine may run here")
    engine = tmp_path / "vit.engine"
    info = build(small_vit, engine)
    with pytest.raises(BackendUnavailable, match="needs an NVIDIA GPU"):
        TensorRTRunner(engine, info).open()


# --- through the project's export (presets, zoo, ONNX reuse) ------------------------------------------


def export(out_dir, spec, name=None, **trt):
    pytest.importorskip("tensorrt_rtx_bindings", reason="TensorRT-RTX wheels not installed")
    return api.export("tensorrt", spec, TensorRTOptions(builder="rtx", **trt), out_dir, name=name)


# tiny at full depth; small and base at one block, with their widths and heads: the builder's time grows
# with depth and a deeper stack adds the same layers (test_exports.py checks base at full depth through
# the ONNX the engine is built from).
@pytest.mark.parametrize("preset,overrides", [("tiny", {}), ("small", {"depth": 1}), ("base", {"depth": 1})],
                         ids=["tiny", "small", "base"])
def test_presets_build_engines_whose_io_matches_the_onnx(out_dir, preset, overrides):
    spec = SourceSpec(preset, overrides=overrides)
    result = export(out_dir, spec, min_batch=1, opt_batch=4, max_batch=8)
    info = result["info"]
    assert info["io_matches_onnx"] and info["flavour"] == "rtx" and info["engine_bytes"] > 1_000_000
    assert {t["name"]: t["shape"] for t in info["io"]} == {"pixel_values": [-1, 3, 224, 224], "logits": [-1, 1000]}
    assert info["profiles"] == [[1, 4, 8]] and len(info["onnx_sha256"]) == 64
    onnx_path = Path(info["onnx_path"])  # the engine's profile is dynamic, and so is the ONNX it builds from
    assert onnx_path == (out_dir / f"{artifact_stem(spec, preset)}-dynamic.onnx").resolve() and onnx_path.is_file()
    parity = result["parity"]
    if parity["passed"] is None:  # honest: the engine was not run here
        assert "GPU" in parity["skipped"]


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("model", ZOO)
def test_zoo_models_build(out_dir, model, precision):
    result = export(out_dir, SourceSpec(zoo_spec(model)), precision=precision)
    info = result["info"]
    assert info["io_matches_onnx"]
    if precision == "fp16":  # the typed ONNX the engine came from computes what the fp32 one does
        import onnxruntime
        from onnx.reference import ReferenceEvaluator

        fp32, fp16 = out_dir / info["onnx"], out_dir / info["built_from"]
        shape = [1 if d == -1 else d for d in info["io"][0]["shape"]]
        x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
        session = onnxruntime.InferenceSession(str(fp32), providers=["CPUExecutionProvider"])
        want = session.run(None, {"pixel_values": x})
        got = ReferenceEvaluator(str(fp16)).run(None, {"pixel_values": x})
        np.testing.assert_allclose(got[0], want[0], atol=5e-2, rtol=5e-2)


def test_reduced_precision_through_export(out_dir, tmp_path):
    from PIL import Image

    images = tmp_path / "calib"
    images.mkdir()
    for i in range(4):
        pixels = np.random.default_rng(i).integers(0, 255, (64, 64, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(images / f"{i}.png")
    result = export(out_dir, SourceSpec("tiny", overrides={"depth": 1}), precision="int8",
                    calibration_images=str(images))
    assert result["info"]["built_from"] == "tiny-depth1-int8.int8-qdq.onnx" and result["precision"] == "int8"


def test_fp16_engine_from_a_decomposed_layernorm_is_linted(out_dir):
    """Opset 16 spells LayerNorm out in primitives, which overflow in fp16: the engine's static check
    says so even where the engine cannot run."""
    result = export(out_dir, SourceSpec("tiny", overrides={"depth": 1}), precision="fp16", opset=16)
    lint = [f for f in result["parity"]["lint"] if f["rule"] == "decomposed-layernorm"]
    assert lint and {f["severity"] for f in lint} == {"warning"}
    fp32 = export(out_dir, SourceSpec("tiny", overrides={"depth": 1}), opset=16, name="fp32-engine")
    assert {f["severity"] for f in fp32["parity"]["lint"] if f["rule"] == "decomposed-layernorm"} == {"info"}


def test_the_sidecar_matching_onnx_is_reused(out_dir):
    pytest.importorskip("tensorrt_rtx_bindings", reason="TensorRT-RTX wheels not installed")
    api.export("onnx", SourceSpec("tiny", overrides={"depth": 1}), None, out_dir)
    result = export(out_dir, SourceSpec("tiny", overrides={"depth": 1}))
    assert result["info"]["onnx_source"].startswith("reused tiny-depth1.onnx")
    other = export(out_dir, SourceSpec("tiny", overrides={"depth": 1}), min_batch=1, opt_batch=2, max_batch=2)
    assert other["info"]["onnx_source"].startswith("exported")  # a dynamic request does not reuse a static ONNX


def test_verify_without_a_gpu_is_exit_3(out_dir):
    import torch

    result = export(out_dir, SourceSpec("tiny", overrides={"depth": 1}))
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the engine may run")
    with pytest.raises(BackendUnavailable, match="GPU"):
        api.verify(result["artifact"])


# --- on a GPU that TensorRT-RTX runs on ---------------------------------------------------------------


def runnable_gpu():
    import torch

    from vitexport.backends.tensorrt import BACKEND

    if not torch.cuda.is_available():
        pytest.skip("needs an NVIDIA GPU")
    here = BACKEND.runs_here()
    if not here.ok:
        pytest.skip(here.reason)


@pytest.mark.gpu
@pytest.mark.parametrize("precision,atol", [("fp32", 1e-3), ("fp16", 5e-2)])
def test_engine_matches_pytorch_on_a_gpu(rtx, small_vit, tmp_path, precision, atol):
    from vitexport.backends.tensorrt.runner import TensorRTRunner

    runnable_gpu()
    engine = tmp_path / "vit.engine"
    info = build(small_vit, engine, precision=precision, min_batch=1, opt_batch=2, max_batch=4)
    assert info["io_source"] == "engine"
    with TensorRTRunner(engine, info) as runner:
        for batch in (1, 3):
            got = runner.run({"pixel_values": small_vit.x[:batch]})["logits"]
            np.testing.assert_allclose(got, small_vit.logits[:batch], atol=atol, rtol=atol)
        assert runner.last_gpu_ms > 0
        report = runner.layer_report()
        assert report["layers"] > 0 and report["placement"]["dla"] == 0
        with pytest.raises(RuntimeFailure, match="outside the engine's profiles"):
            runner.run({"pixel_values": np.zeros((5, 3, 32, 32), np.float32)})


@pytest.mark.gpu
def test_bucket_profiles_each_run_on_a_gpu(rtx, small_vit, tmp_path):
    from vitexport.backends.tensorrt.runner import TensorRTRunner

    runnable_gpu()
    engine = tmp_path / "vit.engine"
    info = build(small_vit, engine, min_batch=1, opt_batch=4, max_batch=4, batch_buckets=(1, 4))
    with TensorRTRunner(engine, info) as runner:
        for batch in (1, 3):
            got = runner.run({"pixel_values": small_vit.x[:batch]})["logits"]
            np.testing.assert_allclose(got, small_vit.logits[:batch], atol=1e-3, rtol=1e-3)
