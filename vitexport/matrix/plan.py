"""The matrix plan: a TOML file naming models, targets and bench settings, read bounded and checked
whole before any work starts. Every mistake is a PlanError (exit 2) naming the file and the key:
`plan.toml: targets[1].precision: 'fp64' is not one of fp32, fp16, int8` (indices count from 0).

Paths in a plan (images, weights, model files, `hf:` folders, option values that name files or
folders) are relative to the plan's own folder, so a plan means the same from any working directory.
"""

from __future__ import annotations

import dataclasses
import re
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vitexport.core.errors import UsageError, VitexportError
from vitexport.matrix.plan_values import PlanError, PlanValues

MAX_BYTES = 1 << 20  # a plan is a few kB; a megabyte is some ten thousand models
DEFAULT_DEVICE = "local"
DEVICE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")  # also a Ray resource name: device:NAME
TOP_KEYS = ("name", "seed", "check", "bench", "models", "targets")
CHECK_KEYS = ("images", "atol", "rtol", "min_top1_agreement", "max_accuracy_drop")
BENCH_KEYS = ("batches", "threads", "warmup_iters", "warmup_s", "iters", "budget_s", "rounds", "roofline", "devices")
MODEL_KEYS = ("name", "config", "model", "set", "weights", "allow_pickle", "input_shape")
TARGET_KEYS = ("backend", "precision", "precisions", "options", "bench", "devices", "name")


@dataclass(frozen=True)
class Model:
    label: str  # the model's name in reports and cell ids
    spec: Any  # vitexport.models.sources.SourceSpec, paths absolute
    key: str  # where it is in the plan: models[0]


@dataclass(frozen=True)
class Target:
    """One backend with one precision and its options: what one export per model builds."""

    label: str  # "onnx int8"
    backend: str
    options: Any  # the backend's Options, validated
    bench: tuple[str, ...]  # bench targets that time its artifacts
    devices: tuple[str, ...]  # where they are timed
    key: str  # targets[0], or targets[0].precisions[1] when one entry names several


@dataclass(frozen=True)
class Check:
    images: Path | None = None
    atol: float | None = None
    rtol: float | None = None
    min_top1_agreement: float | None = None
    max_accuracy_drop: float | None = None


@dataclass(frozen=True)
class Bench:
    batches: tuple[int, ...] = (1,)
    threads: int | None = None
    warmup_iters: int = 5
    warmup_s: float = 1.0
    iters: int | None = None
    budget_s: float = 5.0
    rounds: int | None = None  # None: as bench decides (enough short rounds to fill budget_s, at least 8)
    roofline: bool = True
    devices: tuple[str, ...] = (DEFAULT_DEVICE,)

    def settings(self) -> dict[str, Any]:
        """What a timing depends on besides the artifact and the machine (part of its cache key)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in ("batches", "devices")}


@dataclass(frozen=True)
class Plan:
    path: Path
    name: str
    seed: int
    check: Check
    bench: Bench
    models: tuple[Model, ...]
    targets: tuple[Target, ...]

    @property
    def devices(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(d for t in self.targets for d in t.devices))


def load_plan(path: str | Path) -> Plan:
    """Read and check the plan at `path`; PlanError (exit 2) names the first problem."""
    from vitexport.core.jsonfile import read_bounded

    path = Path(path)
    data = read_bounded(path, "plan", MAX_BYTES, PlanError)
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    try:
        doc = tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise PlanError(f"{path.name}: not UTF-8 text") from None
    except tomllib.TOMLDecodeError as e:
        raise PlanError(f"{path.name}: not valid TOML ({e})") from None
    return parse(doc, path)


def parse(doc: dict, path: Path) -> Plan:
    """A Plan from a parsed TOML document; `path` names the file in messages and anchors relative paths."""
    return _Reader(path).plan(doc)


class _Reader(PlanValues):
    """The plan's sections, each read into what it means: models, targets, check and bench settings."""

    def plan(self, doc: dict) -> Plan:
        self.known(doc, TOP_KEYS, "")
        name = self.typed(doc, "name", str, "", default=self.path.stem)
        seed = self.integer(doc, "seed", "", 0, minimum=0, maximum=2**32 - 1)
        check = self.check(self.table(doc, "check", ""))
        bench = self.bench_section(self.table(doc, "bench", ""))
        models = self.entries(doc, "models")
        targets = self.entries(doc, "targets")
        plan_models = tuple(self.model(m, f"models[{i}]", seed) for i, m in enumerate(models))
        labels = [m.label for m in plan_models]
        for i, label in enumerate(labels):
            if labels.index(label) != i:
                raise self.fail(f"models[{i}].name", f"{label!r} names models[{labels.index(label)}] too; give each "
                                                     "model its own name")
        plan_targets = tuple(t for i, entry in enumerate(targets) for t in self.target(entry, f"targets[{i}]", bench))
        seen: dict[Any, str] = {}
        for t in plan_targets:
            same = (t.backend, repr(t.options))
            if same in seen:
                raise self.fail(t.key, f"builds the same artifact as {seen[same]}")
            if t.label in seen:
                raise self.fail(t.key, f"is called {t.label!r} like {seen[t.label]}; give one of them a name")
            seen[same] = seen[t.label] = t.key
        return Plan(self.path, name, seed, check, bench, plan_models, plan_targets)

    def check(self, doc: dict) -> Check:
        self.known(doc, CHECK_KEYS, "check.")
        images = self.path_value(doc, "images", "check.", must="dir")
        values = {k: self.number(doc, k, "check.", minimum=0) for k in ("atol", "rtol")}
        values["min_top1_agreement"] = self.number(doc, "min_top1_agreement", "check.", minimum=0, maximum=1)
        values["max_accuracy_drop"] = self.number(doc, "max_accuracy_drop", "check.", minimum=0, maximum=100)
        return Check(images=images, **values)

    def bench_section(self, doc: dict) -> Bench:
        self.known(doc, BENCH_KEYS, "bench.")
        d = Bench()
        batches = self.int_list(doc, "batches", "bench.", d.batches, minimum=1, maximum=4096)
        iters = self.integer(doc, "iters", "bench.", None, minimum=1, maximum=10_000_000)
        budget = self.number(doc, "budget_s", "bench.", minimum=0, maximum=1e6)
        if iters is None and budget is not None and budget <= 0:
            raise self.fail("bench.budget_s", "must be positive when bench.iters is not given")
        return Bench(
            batches=batches,
            threads=self.integer(doc, "threads", "bench.", None, minimum=1, maximum=4096),
            warmup_iters=self.integer(doc, "warmup_iters", "bench.", d.warmup_iters, minimum=0, maximum=1_000_000),
            warmup_s=_or(self.number(doc, "warmup_s", "bench.", minimum=0, maximum=1e6), d.warmup_s),
            iters=iters, budget_s=_or(budget, d.budget_s),
            rounds=self.integer(doc, "rounds", "bench.", d.rounds, minimum=1, maximum=1000),
            roofline=self.typed(doc, "roofline", bool, "bench.", default=d.roofline),
            devices=self.devices(doc, "bench.", d.devices))

    def model(self, doc: Any, key: str, seed: int) -> Model:
        from vitexport.models.sources import SourceSpec

        doc = self.mapping(doc, key)
        self.known(doc, MODEL_KEYS, key + ".")
        config, spec_text = doc.get("config"), doc.get("model")
        if (config is None) == (spec_text is None):
            raise self.fail(key, "give exactly one of config (a preset) or model (torchvision:, timm:, hf:, "
                                 "file.py:factory, pkg.module:factory)")
        which = "config" if config is not None else "model"
        text = self.typed(doc, which, str, key + ".")
        if not text.strip():
            raise self.fail(f"{key}.{which}", "is empty")
        overrides = self.overrides(doc, key, text) if which == "config" else {}
        if which == "model":
            if "set" in doc:
                raise self.fail(f"{key}.set", "applies to presets (config = ...) only")
            text = self.model_spec(text, f"{key}.model")
        weights = self.path_value(doc, "weights", key + ".", must="file")
        shape = doc.get("input_shape")
        if shape is not None:
            shape = self.int_list(doc, "input_shape", key + ".", None, minimum=1, maximum=16384, distinct=False)
            if len(shape) != 4:
                raise self.fail(f"{key}.input_shape", f"expects four integers N, C, H, W, got {list(shape)}")
        spec = SourceSpec(model=text, overrides=overrides, weights=str(weights) if weights else None,
                          allow_pickle=self.typed(doc, "allow_pickle", bool, key + ".", default=False),
                          input_shape=tuple(shape) if shape else None, seed=seed)
        label = self.typed(doc, "name", str, key + ".", default=None) or default_label(spec)
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}", label):
            raise self.fail(f"{key}.name", f"{label!r} is not a plain name (letters, digits, _ . -)")
        return Model(label, spec, key)

    def overrides(self, doc: dict, key: str, preset: str) -> dict:
        from vitexport.models.presets import PRESETS, ViTConfig

        if preset not in PRESETS:
            raise self.fail(f"{key}.config", f"{preset!r} is not one of {', '.join(PRESETS)}")
        raw = self.table(doc, "set", key + ".")
        fields = {f.name: f for f in dataclasses.fields(ViTConfig) if f.name != "name"}
        hints = typing.get_type_hints(ViTConfig)
        out = {}
        for name, value in raw.items():
            if name not in fields:
                raise self.fail(f"{key}.set.{name}", f"unknown preset field (known: {', '.join(fields)})")
            out[name] = self.coerce(value, hints[name], f"{key}.set.{name}")
        try:
            PRESETS[preset].replace(**out)
        except VitexportError as e:
            raise self.fail(f"{key}.set", str(e)) from None
        return out

    def model_spec(self, text: str, key: str) -> str:
        """`hf:DIR`, `exported:FILE` and `file.py:factory` point into the file system: anchored at the
        plan's folder."""
        prefix, _, rest = text.partition(":")
        if prefix == "exported":
            file = self.anchored(rest)
            if not file.is_file():
                raise self.fail(key, f"{file} is not a file")
            return f"exported:{file}"
        if prefix == "hf":
            folder = self.anchored(rest)
            if not folder.is_dir():
                raise self.fail(key, f"{folder} is not a folder")
            return f"hf:{folder}"
        if prefix.endswith(".py"):
            file = self.anchored(prefix)
            if not file.is_file():
                raise self.fail(key, f"{file} is not a file")
            if not rest:
                raise self.fail(key, f"{text!r} lacks a factory name after ':'")
            return f"{file}:{rest}"
        if ":" in text and not rest:
            raise self.fail(key, f"{text!r} lacks a name after ':'")
        return text

    def target(self, doc: Any, key: str, bench: Bench) -> list[Target]:
        from vitexport import backends

        doc = self.mapping(doc, key)
        self.known(doc, TARGET_KEYS, key + ".")
        name = self.typed(doc, "backend", str, key + ".")
        exporters = [be.name for be in backends.exporters()]
        if name not in exporters:
            raise self.fail(f"{key}.backend", f"{name!r} is not one of {', '.join(exporters)}")
        be = backends.get(name)
        fields = {f.name: f for f in dataclasses.fields(be.Options) if f.metadata.get("cli", True)}
        if "precision" in doc and "precisions" in doc:
            raise self.fail(key, "give precision or precisions, not both")
        if "precision" in doc:
            precisions: list[tuple[str | None, str]] = [(self.typed(doc, "precision", str, key + "."),
                                                         f"{key}.precision")]
        elif "precisions" in doc:
            items = self.typed(doc, "precisions", list, key + ".")
            if not items:
                raise self.fail(f"{key}.precisions", "is empty")
            precisions = [(self.item(p, str, f"{key}.precisions[{i}]"), f"{key}.precisions[{i}]")
                          for i, p in enumerate(items)]
        else:
            precisions = [(None, key)]
        if precisions[0][0] is not None and "precision" not in fields:
            raise self.fail(precisions[0][1], f"{name} has no precision option")
        raw = self.table(doc, "options", key + ".")
        if "precision" in raw:
            raise self.fail(f"{key}.options.precision", "is given by the target's precision or precisions")
        options = {}
        for option, value in raw.items():
            if option not in fields:
                raise self.fail(f"{key}.options.{option}", f"unknown option of {name} (known: "
                                                           f"{', '.join(f for f in fields if f != 'precision')})")
            options[option] = self.option_value(value, fields[option], be.Options, f"{key}.options.{option}")
        bench_names = self.bench_targets(doc, key, be)
        devices = self.devices(doc, key + ".", bench.devices)
        label = self.typed(doc, "name", str, key + ".", default=None)
        targets = []
        for precision, where in precisions:
            values = dict(options)
            if precision is not None:
                values["precision"] = self.option_value(precision, fields["precision"], be.Options, where)
            opts = be.Options(**values)
            try:
                opts.validate()
            except UsageError as e:
                text = in_plan_words(str(e), be.Options)
                if precision is not None and len(precisions) > 1:
                    text += f" (with precision {precision})"
                raise self.fail(key, text) from None
            text = label or name
            if "precision" in fields and (label is None or len(precisions) > 1):
                text = f"{text} {opts.precision}"
            targets.append(Target(text, name, opts, bench_names, devices, where if len(precisions) > 1 else key))
        return targets

    def bench_targets(self, doc: dict, key: str, be) -> tuple[str, ...]:
        own = [t.name for t in be.bench_targets()]
        if "bench" not in doc:
            return tuple(own[:1])
        names = self.typed(doc, "bench", list, key + ".")
        out = []
        for i, item in enumerate(names):
            item = self.item(item, str, f"{key}.bench[{i}]")
            if item not in own:
                raise self.fail(f"{key}.bench[{i}]", f"{item!r} is not one of {', '.join(own)} (what runs "
                                                     f"{be.name} artifacts)")
            out.append(item)
        return tuple(dict.fromkeys(out))

    def option_value(self, value: Any, field: dataclasses.Field, options_cls: type, key: str) -> Any:
        """A TOML value as the Options field holds it, checked against the field's type, choices and range."""
        from vitexport.core.options import check_fields

        hint = typing.get_type_hints(options_cls)[field.name]
        value = self.coerce(value, hint, key)
        if isinstance(value, str) and names_a_path(field):
            value = str(self.anchored(value))
        choices = field.metadata.get("choices") or ()
        items = value if isinstance(value, tuple) else (value,)
        if choices and value is not None:
            fold = (lambda v: str(v).upper()) if field.metadata.get("fold_case") else (lambda v: v)
            bad = [v for v in items if fold(v) not in {fold(c) for c in choices}]
            if bad:
                raise self.fail(key, f"{bad[0]!r} is not one of {', '.join(map(str, choices))}")
        probe = options_cls.__new__(options_cls)  # one field's declared range, without the others' rules
        object.__setattr__(probe, field.name, value)
        for other in dataclasses.fields(options_cls):
            if other.name != field.name:
                object.__setattr__(probe, other.name, None)
        try:
            check_fields(probe)
        except UsageError as e:
            raise self.fail(key, str(e).replace(f"{_flag(field)} ", "", 1)) from None
        return value

    def devices(self, doc: dict, prefix: str, default: tuple[str, ...]) -> tuple[str, ...]:
        if "devices" not in doc:
            return default
        names = self.coerce(doc["devices"], tuple[str, ...], prefix + "devices")
        if not names:
            raise self.fail(prefix + "devices", "is empty")
        for i, name in enumerate(names):
            if not DEVICE_NAME.match(name):
                raise self.fail(f"{prefix}devices[{i}]", f"{name!r} is not a device name (letters, digits, _ . -; "
                                                         "at most 64)")
        return tuple(dict.fromkeys(names))


def names_a_path(field: dataclasses.Field) -> bool:
    """Whether an option's value is a file or folder (anchored at the plan's folder, and its contents
    part of the cache key). Options do not declare it, so it goes by the field's name."""
    return field.name in ("labels", "bundle") or field.name.endswith(("_images", "_cache", "_dir", "_file"))


def in_plan_words(message: str, options_cls: type) -> str:
    """An Options message as a plan reads: `--keep-fp32` is `keep_fp32`, `--no-per-channel` is
    `per_channel = false`."""
    from vitexport.core.options import flag_of

    for f in sorted(dataclasses.fields(options_cls), key=lambda f: -len(flag_of(f))):
        flag = flag_of(f)
        message = re.sub(rf"--no-{re.escape(flag[2:])}(?![\w-])", f"{f.name} = false", message)
        message = re.sub(rf"{re.escape(flag)}(?![\w-])", f.name, message)
    return message


def default_label(spec) -> str:
    """A report name for a model: the preset and its overrides (`tiny-depth1`), else the spec's name."""
    from vitexport.models.sources import artifact_stem

    text = spec.model
    if ":" in text:
        prefix, _, rest = text.partition(":")
        text = Path(rest).name if prefix == "hf" else rest if prefix in ("torchvision", "timm") else \
            f"{Path(prefix).stem}-{rest}" if prefix.endswith(".py") else rest
    return artifact_stem(spec, text)


def _or(value, default):
    return default if value is None else value


def _flag(field: dataclasses.Field) -> str:
    from vitexport.core.options import flag_of

    return flag_of(field)
