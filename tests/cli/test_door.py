"""The door, fuzzed: real files that vitexport wrote (a bench report, a merged report, a matrix report,
a sidecar, a package's manifest and its device report, a matrix plan and cache records) are mutated by
Hypothesis (types swapped, numbers at the edges, hostile strings, keys dropped or added) and handed to
every command that reads them. Whatever the file holds, a command answers with one of its documented
exit codes and, when it refuses, with one line: never an internal error, never a traceback.

The suite tries a bounded number of examples per command (FUZZ_EXAMPLES, repeatable: derandomized);
`VITEXPORT_FUZZ_EXAMPLES=N pytest tests/cli/test_door.py` tries N per command with a random seed."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from vitexport.cli.app import app

ROOT = Path(__file__).resolve().parents[1]
SEEDS = ROOT / "data" / "door"
FUZZ_EXAMPLES = int(os.environ.get("VITEXPORT_FUZZ_EXAMPLES", "0"))
# VITEXPORT_FUZZ_SHRINK=0 reports the first failing example as found, without minimising it (faster).
PHASES = [Phase.explicit, Phase.reuse, Phase.generate] + ([Phase.shrink] if os.environ.get("VITEXPORT_FUZZ_SHRINK") != "0"
                                                          else [])
SETTINGS = settings(max_examples=FUZZ_EXAMPLES or 10, deadline=None, database=None, derandomize=not FUZZ_EXAMPLES,
                    phases=PHASES, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                                          HealthCheck.data_too_large])

# What a hostile or careless hand may put in a field: other types, numbers at the edges, strings that
# are paths, markup, control characters or very long.
EDGE_NUMBERS = [0, -0.0, -1, 1, 2**31, 2**63, -(2**63), 2**64, 1e308, -1e308, 5e-324, float("nan"), float("inf"),
                float("-inf"), 1e-300, 0.5, 1.0000001, -1.0000001, 86_400_001.0]
HOSTILE_TEXT = ["", "2", "1e308", "NaN", "true", "null", "../../etc/passwd", "/dev/zero", "[red]x[/red]", "\x00",
                "\u202e\u0000\ud7ff", "é" * 3, "a" * 5000, "{0}%s%d", "<script>document.title='x'</script>", "\n\n",
                "\ud800", "x\udfffy", "\x1b[2J", "\u0085\u2028\ufeff", "\U0010ffff"]
# Integers far beyond any field (Hypothesis itself shows at most 4,300 digits; tests/core/test_jsonfile.py
# writes longer ones as text).
HUGE_INTEGERS = st.integers(min_value=10**300, max_value=10**4000) | st.integers(min_value=-10**4000, max_value=-10**300)
SCALARS = st.one_of(st.sampled_from(EDGE_NUMBERS), st.sampled_from(HOSTILE_TEXT), st.booleans(), st.none(),
                    st.integers(), st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=40),
                    st.text(alphabet=st.characters(exclude_categories=()), max_size=12), HUGE_INTEGERS)
VALUES = st.one_of(SCALARS, st.lists(SCALARS, max_size=3), st.dictionaries(st.text(max_size=8), SCALARS, max_size=3))


def paths(value, here=()) -> list[tuple]:
    """Every place in a parsed JSON document, containers included."""
    found = [here]
    if isinstance(value, dict):
        for key, item in value.items():
            found += paths(item, here + (key,))
    elif isinstance(value, list):
        for i, item in enumerate(value[:4]):  # a few rows stand for all of them
            found += paths(item, here + (i,))
    return found


def mutated(data, document):
    """`document` with one to three mutations drawn by Hypothesis: a value replaced, a key dropped or added."""
    document = json.loads(json.dumps(document))
    for _ in range(data.draw(st.integers(1, 3))):
        places = paths(document)
        where = data.draw(st.sampled_from(places[1:] or places))
        parent = document
        for step in where[:-1]:
            parent = parent[step]
        leaf = where[-1] if where else None
        action = data.draw(st.sampled_from(["replace", "replace", "drop", "add"]))
        if action == "replace" or leaf is None:
            parent[leaf] = data.draw(VALUES)
        elif action == "drop":
            del parent[leaf]
        else:
            target = parent[leaf]
            if isinstance(target, dict):
                target[data.draw(st.text(min_size=1, max_size=12))] = data.draw(VALUES)
            elif isinstance(target, list):
                target.append(data.draw(VALUES))
            else:
                parent[leaf] = data.draw(VALUES)
    return document


def dumped(document) -> str:
    """JSON text as Python writes it (NaN and Infinity as tokens, lone surrogates escaped), integers of
    any length included."""
    limit = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)
    try:
        return json.dumps(document)
    finally:
        sys.set_int_max_str_digits(limit)


def write(path: Path, document) -> Path:
    path.write_text(dumped(document), encoding="utf-8")
    return path


def raw_mutated(data, document) -> bytes:
    """The document's text with a change at the bytes: a key given again with another value, a
    byte-order mark, another encoding, or bytes that are not UTF-8."""
    text = dumped(mutated(data, document) if data.draw(st.booleans()) else document)
    action = data.draw(st.sampled_from(["repeat", "repeat", "bom", "encoding", "bytes"]))
    if action == "repeat":  # `"key": value` again, right after the first, in one of the objects
        keys = [m for m in re.finditer(r'"((?:[^"\\]|\\.)*)": ', text)]
        if keys:
            at = data.draw(st.sampled_from(keys))
            again = f'"{at.group(1)}": {dumped(data.draw(SCALARS))}, '
            return (text[:at.start()] + again + text[at.start():]).encode("utf-8")
    if action == "bom":
        return data.draw(st.sampled_from([b"\xef\xbb\xbf", b"\xff\xfe", b"\xfe\xff"])) + text.encode("utf-8")
    if action == "encoding":
        return json.dumps(json.loads(text), ensure_ascii=False).encode(data.draw(st.sampled_from(
            ["utf-16", "utf-16-be", "utf-32", "utf-8"])), errors="surrogatepass")
    raw = bytearray(text.encode("utf-8"))
    at = data.draw(st.integers(0, len(raw)))
    raw[at:at] = data.draw(st.sampled_from([b"\xff", b"\xe9", b"\xc3", b"\xed\xa0\x80", b"\x00"]))
    return bytes(raw)


def answered(result, codes: set[int]) -> None:
    """One of the command's documented exit codes, and a refusal on one line, in vitexport's words."""
    text = result.stderr
    assert result.exit_code in codes, (result.exit_code, text[-2000:], repr(result.exception))
    assert "internal error" not in text and "Traceback" not in text, text[-2000:]
    if result.exit_code not in (0, 4, 5):
        lines = [line for line in text.splitlines() if line.strip()]
        assert lines and lines[-1].startswith("error:") and len([x for x in lines if x.startswith("error:")]) == 1, text


def invoke(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


@pytest.fixture(scope="module")
def real(tmp_path_factory, shared_artifacts):
    """Real files written by this vitexport: an ONNX artifact and its sidecar (the run's shared export of
    a one-block tiny at 32x32, read-only: tests copy it before changing it), its deploy package and the
    report of its check (run as a device would), a bench report of it (timed by fake workers: fast, and
    the report is written for real), a merged report, plus a matrix report, plan and cache records
    kept in tests/data/door (a matrix run is too slow to repeat here)."""
    sys.path.insert(0, str(ROOT))
    from fake_workers import install

    from vitexport.backends.onnx.options import OnnxOptions
    from vitexport.models.sources import SourceSpec

    out = tmp_path_factory.mktemp("door")
    artifact = Path(shared_artifacts.built("onnx", SourceSpec("tiny", overrides={"depth": 1, "image_size": 32}),
                                           OnnxOptions())["artifact"])
    assert invoke("package", artifact, "--target", "linux", "--out", out / "pkg", "--quiet").exit_code == 0
    package = next(p for p in (out / "pkg").iterdir() if p.is_dir())
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    # Timed by budget as by default, a quarter second per case (eight rounds, the fewest) instead of three.
    subprocess.run([sys.executable, "check.py", "--budget-s", "0.25"], cwd=package, env=env, check=True,
                   capture_output=True, timeout=120)
    with pytest.MonkeyPatch.context() as mp:
        install(mp)
        bench = invoke("bench", artifact, "--backend", "onnxruntime", "--batch", "1", "--batch", "2", "--no-roofline",
                       "--budget-s", "1", "--out", out / "bench", "--quiet")
        assert bench.exit_code == 0, bench.stderr
    report = next((out / "bench").glob("*.json"))
    other = shutil.copy(report, out / "other.json")  # the same machine twice: a merged report all the same
    merged = invoke("compare", report, other, "--out", out / "compare")
    assert merged.exit_code == 0, merged.stderr
    return {"artifact": artifact, "package": package, "bench": report, "out": out,
            "compare": out / "compare" / "compare.json"}


def loaded(path: Path):
    return json.loads(Path(path).read_text(encoding="utf-8"))


@pytest.mark.parametrize("seed", ["bench", "compare", "matrix"])
def test_report_reads_any_report(real, tmp_path, seed):
    document = loaded(SEEDS / "matrix-report.json" if seed == "matrix" else real[seed])

    @SETTINGS
    @given(st.data())
    def check(data):
        path = write(tmp_path / "edited.json", mutated(data, document))
        answered(invoke("report", path, "--out", tmp_path / "page.html"), {0, 2})

    check()


def test_compare_reads_any_report(real, tmp_path):
    document = loaded(real["bench"])

    @SETTINGS
    @given(st.data())
    def check(data):
        path = write(tmp_path / "edited.json", mutated(data, document))
        answered(invoke("compare", real["bench"], path, "--out", tmp_path / "merged"), {0, 2})

    check()


def test_bench_baseline_reads_any_report(real, tmp_path, monkeypatch):
    from fake_workers import install

    install(monkeypatch)
    document = loaded(real["bench"])

    @SETTINGS
    @given(st.data())
    def check(data):
        path = write(tmp_path / "edited.json", mutated(data, document))
        answered(invoke("bench", real["artifact"], "--backend", "onnxruntime", "--batch", "1", "--no-roofline",
                        "--budget-s", "1", "--baseline", path, "--out", tmp_path / "bench", "--quiet"), {0, 2, 5})

    check()


@pytest.mark.parametrize("command", ["compare", "report", "bench-baseline", "verify-sidecar", "device-report",
                                     "device-manifest"])
def test_every_reader_takes_any_bytes(real, tmp_path, monkeypatch, command):
    """The same file at the bytes: a key given twice, a byte-order mark, UTF-16, bytes that are not
    UTF-8, alongside the mutated values (text of any code point, integers of any size)."""
    from fake_workers import install

    from vitexport.export import sidecar

    install(monkeypatch)
    artifact = tmp_path / real["artifact"].name
    shutil.copy(real["artifact"], artifact)
    shutil.copy(sidecar.path_for(real["artifact"]), sidecar.path_for(artifact))
    package = tmp_path / real["package"].name
    shutil.copytree(real["package"], package)
    target, seed = {"verify-sidecar": (sidecar.path_for(artifact), sidecar.path_for(real["artifact"])),
                    "device-report": (package / "device-report.json", real["package"] / "device-report.json"),
                    "device-manifest": (package / "manifest.json", real["package"] / "manifest.json")}.get(
        command, (tmp_path / "edited.json", real["bench"]))
    document = loaded(seed)
    runs = {"compare": (["compare", real["bench"], target, "--out", tmp_path / "merged"], {0, 2}),
            "report": (["report", target, "--out", tmp_path / "page.html"], {0, 2}),
            "bench-baseline": (["bench", artifact, "--backend", "onnxruntime", "--batch", "1", "--no-roofline",
                                "--budget-s", "1", "--baseline", target, "--out", tmp_path / "bench", "--quiet"],
                               {0, 2, 5}),
            "verify-sidecar": (["verify", artifact, "--quiet"], {0, 2, 3, 4}),
            "device-report": (["verify", "--device-report", package / "device-report.json", "--quiet"], {0, 2, 4}),
            "device-manifest": (["verify", "--device-report", package / "device-report.json", "--quiet"], {0, 2, 4})}
    args, codes = runs[command]

    @SETTINGS
    @given(st.data())
    def check(data):
        target.write_bytes(raw_mutated(data, document))
        answered(invoke(*args), codes)

    check()


def test_verify_reads_any_sidecar(real, tmp_path):
    from vitexport.export import sidecar

    artifact = tmp_path / real["artifact"].name
    shutil.copy(real["artifact"], artifact)
    document = loaded(sidecar.path_for(real["artifact"]))

    @SETTINGS
    @given(st.data())
    def check(data):
        write(sidecar.path_for(artifact), mutated(data, document))
        answered(invoke("verify", artifact, "--quiet"), {0, 2, 3, 4})

    check()


@pytest.mark.parametrize("which", ["device-report.json", "manifest.json"])
def test_verify_device_report_reads_any_report_and_manifest(real, tmp_path, which):
    package = tmp_path / real["package"].name
    shutil.copytree(real["package"], package)
    document = loaded(real["package"] / which)

    @SETTINGS
    @given(st.data())
    def check(data):
        write(package / which, mutated(data, document))
        answered(invoke("verify", "--device-report", package / "device-report.json", "--quiet"), {0, 2, 4})

    check()


def test_matrix_reads_any_plan(tmp_path, monkeypatch):
    """The plan is the door: once it is read whole, the work (stubbed here) may start."""
    import tomllib

    from vitexport.core.errors import UsageError
    from vitexport.matrix import run as matrix_run

    def accepted(*args, **kwargs):
        raise UsageError("plan accepted")

    monkeypatch.setattr(matrix_run, "run", accepted)
    document = tomllib.loads((SEEDS / "plan.toml").read_text(encoding="utf-8"))

    @SETTINGS
    @given(st.data())
    def check(data):
        plan = mutated(data, document)
        path = tmp_path / "plan.toml"
        path.write_text(toml(plan), encoding="utf-8")
        answered(invoke("matrix", path, "--out", tmp_path / "out"), {2})

    check()


def toml(document: dict) -> str:
    """A TOML rendering of a parsed plan (values JSON can say; TOML's own strings and numbers), enough
    to hand mutated plans to the reader: tables, arrays of tables, and inline values."""
    def value(v):
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, float):
            return "nan" if v != v else ("inf" if v == float("inf") else "-inf" if v == float("-inf") else repr(v))
        if isinstance(v, int):
            return str(v)
        if v is None:
            return '"null"'  # TOML has no null: the nearest hostile value
        if isinstance(v, str):
            return json.dumps(v)
        if isinstance(v, list):
            return "[" + ", ".join(value(x) for x in v) + "]"
        return "{" + ", ".join(f"{json.dumps(str(k))} = {value(x)}" for k, x in v.items()) + "}"

    lines = [f"{json.dumps(str(k))} = {value(v)}" for k, v in document.items() if not isinstance(v, (dict, list))
             or (isinstance(v, list) and not all(isinstance(x, dict) for x in v)) or v == []]
    for key, v in document.items():
        if isinstance(v, dict):
            lines += [f"[{json.dumps(str(key))}]"] + [f"{json.dumps(str(k))} = {value(x)}" for k, x in v.items()]
        elif isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
            for item in v:
                lines += [f"[[{json.dumps(str(key))}]]"] + [f"{json.dumps(str(k))} = {value(x)}" for k, x in item.items()]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("kind", ["export", "timing"])
def test_a_damaged_cache_record_is_redone_never_an_error(tmp_path, kind):
    from vitexport.matrix.cache import Cache

    document = loaded(SEEDS / f"{kind}-record.json")
    cache = Cache(tmp_path)
    cache.dir.mkdir(parents=True, exist_ok=True)

    @SETTINGS
    @given(st.data())
    def check(data):
        record = mutated(data, document)
        key = document["key"]
        write(cache.dir / f"{kind}-{key}.json", record)
        got = cache.get(kind, key)
        assert got is None or got == json.loads(json.dumps(record))

    check()


@pytest.mark.parametrize("name, seed", [("bench-report", "matrix-report.json"), ("matrix-timing-record", "timing-record.json"),
                                        ("matrix-export-record", "export-record.json")])
def test_the_seeds_are_files_this_vitexport_reads(name, seed):
    from vitexport.core import schemas

    schemas.check(name, loaded(SEEDS / seed), seed)


def test_the_files_this_vitexport_writes_pass_their_schemas_and_the_published_json_schemas(real):
    """Both ways of reading the schemas accept what the commands wrote just now: the models, and the
    JSON Schemas in the manual (with a JSON Schema validator, as another tool would)."""
    jsonschema = pytest.importorskip("jsonschema")
    from vitexport.core import schemas
    from vitexport.export import sidecar

    package = real["package"]
    written = {"sidecar": sidecar.path_for(real["artifact"]), "bench-report": real["bench"],
               "package-manifest": package / "manifest.json", "golden": package / "golden" / "golden.json",
               "device-report": package / "device-report.json"}
    for name, path in [*written.items(), ("bench-report", real["compare"])]:
        document = loaded(path)
        schemas.check(name, document, path)
        published = json.loads((ROOT.parent / "docs" / "reference" / "schemas" / f"{name}.json").read_text())
        jsonschema.validate(document, published)


@pytest.mark.parametrize("field, value, named", [
    ("verification.cosine_similarity", 1e308, "results[0].verification.cosine_similarity: 1e+308 is not within [-1, 1]"),
    ("verification.max_abs_error", "2", "results[0].verification.max_abs_error: '2' is text, not a number"),
    ("throughput_ips", "2", "results[0].throughput_ips: '2' is text, not a number"),
])
def test_report_refuses_the_numbers_that_broke_its_charts(real, tmp_path, field, value, named):
    """A cosine of 1e308 overflowed the chart's ticks; a number written as a string broke its format."""
    document = loaded(real["bench"])
    row = next(r for r in document["results"] if r.get("verification", {}).get("status") == "verified")
    document["results"] = [row]
    *parents, leaf = field.split(".")
    target = row
    for part in parents:
        target = target[part]
    target[leaf] = value
    result = invoke("report", write(tmp_path / "edited.json", document), "--out", tmp_path / "page.html")
    assert result.exit_code == 2 and named in result.stderr, result.stderr
    assert not (tmp_path / "page.html").exists()


@pytest.mark.parametrize("command", ["compare", "bench-baseline"])
@pytest.mark.parametrize("change, named", [
    (lambda t: re.sub(r'"p50": [^,}]+', '"p50": ' + "7" * 5000, t, count=1), "latency_ms.p50: a number of 5000 digits"),
    (lambda t: t.replace('"p50": ', '"p50": -1, "p50": ', 1), "latency_ms.p50: the key 'p50' is given twice"),
    (lambda t: t.replace('"model": ', '"model": "\\ud800", "x": ', 1), "model: the text holds a lone surrogate U+D800"),
    (lambda t: "\ufeff" + t, "byte-order mark"),
])
def test_what_the_standard_library_parses_and_no_reader_takes_is_refused_naming_where(real, tmp_path, monkeypatch,
                                                                                     command, change, named):
    from fake_workers import install

    install(monkeypatch)
    path = tmp_path / "edited.json"
    path.write_text(change(real["bench"].read_text(encoding="utf-8")), encoding="utf-8")
    args = ["compare", real["bench"], path, "--out", tmp_path / "merged"] if command == "compare" else \
        ["bench", real["artifact"], "--backend", "onnxruntime", "--batch", "1", "--no-roofline", "--budget-s", "1",
         "--baseline", path, "--out", tmp_path / "bench", "--quiet"]
    result = invoke(*args)
    assert result.exit_code == 2 and named in result.stderr and str(path) in result.stderr, result.stderr
    answered(result, {2})
