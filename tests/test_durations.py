"""The suite's time report (tests/durations.py): every phase of a test counted once, summed per folder
and file, the largest first."""

from durations import Durations


def test_phases_are_summed_per_test_folder_and_file():
    d = Durations()
    for nodeid, seconds in [("tests/a/test_x.py::t1", 1.0), ("tests/a/test_x.py::t1", 0.5),  # setup, call
                            ("tests/a/test_y.py::t2[p]", 4.0), ("tests/test_z.py::t3", 2.0)]:
        d.add(nodeid, seconds)
    assert d.totals("folder") == [("tests/a", 2, 5.5), ("tests", 1, 2.0)]
    assert d.totals("file") == [("tests/a/test_y.py", 1, 4.0), ("tests/test_z.py", 1, 2.0),
                                ("tests/a/test_x.py", 1, 1.5)]
    lines = d.lines(files=2)
    assert "3 tests" in lines[0] and "test time 8 s summed" in lines[0]  # 7.5 s, whole seconds
    assert any(line.startswith("tests/a ") and "73.3%" in line for line in lines)
    assert sum(line.startswith("tests/") and ".py" in line for line in lines) == 2


def test_each_test_counts_for_the_backend_it_names_first_by_its_parameters():
    d = Durations()
    for nodeid, seconds in [("tests/b/test_hf.py::test_torchscript_and_coreml_match[executorch-ViT]", 3.0),
                            ("tests/b/test_executorch.py::test_int8", 2.0),  # the file names it
                            ("tests/b/test_x.py::test_onnx_then_coreml", 1.0),  # the function: the first named
                            ("tests/cli/test_faults.py::test_hostile[report-deep]", 0.5),
                            ("tests/b/test_x.py::test_coremltools_is_no_backend_word", 0.25)]:
        d.add(nodeid, seconds)
    names = ["onnx", "coreml", "executorch"]
    assert d.by_backend(names) == [("executorch", 2, 5.0), ("onnx", 1, 1.0), ("(none named)", 2, 0.75)]
    lines = d.lines(backends=names)
    assert any(line.startswith("executorch ") and "74.1%" in line for line in lines)
    assert not any(line.startswith("executorch ") for line in Durations().lines() + d.lines())  # only when asked
