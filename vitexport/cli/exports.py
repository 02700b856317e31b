"""The export commands (`vitexport onnx`, `coreml`, ...), one per exporter in the backend registry:
the options every export shares (vitexport.cli.options) plus the flags of the backend's own Options
dataclass, read from its fields, so a new backend brings its command with it."""

from __future__ import annotations

import dataclasses
import functools
import inspect
import types
import typing
from typing import Annotated, Any, Callable, Optional

import typer

from vitexport import backends
from vitexport.cli.options import EXPORT_PARAMS, SOURCE_PARAMS, command_param, source_spec
from vitexport.cli.options import gate as gate_of
from vitexport.cli.running import handle_errors, progress_for, stdout_to_stderr
from vitexport.core.options import flag_of, help_of, parse_list


def _flag_type(hint: Any) -> tuple[Any, bool, Any]:
    """(type of the CLI value, whether it is a comma list, item type of the list) for a field's type."""
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        hint = next(a for a in args if a is not type(None))
        args = typing.get_args(hint)
    if typing.get_origin(hint) is tuple:
        return str, True, args[0]
    return hint, False, None


def option_params(options_cls: type) -> list[tuple[dataclasses.Field, inspect.Parameter, Callable]]:
    """A CLI parameter for every flag of an Options dataclass, and how to turn its value back."""
    hints = typing.get_type_hints(options_cls)
    out = []
    for f in dataclasses.fields(options_cls):
        if not f.metadata.get("cli", True):
            continue
        kind, is_list, item = _flag_type(hints[f.name])
        flag = flag_of(f)
        if is_list:  # repeatable, and each value may be a comma list: --batch 1 --batch 4 is --batch 1,4
            default = [",".join(map(str, f.default))] if f.default else None
            opt = typer.Option(flag, help=help_of(f), metavar="A,B,...")
            param = command_param(f.name, Annotated[Optional[list[str]], opt], default)
            convert = functools.partial(_joined_list, item=item, flag=flag)
        elif kind is bool:
            names = flag if not f.default else f"{flag}/--no-{flag[2:]}"
            param = command_param(f.name, Annotated[bool, typer.Option(names, help=help_of(f))], f.default)
            convert = _same
        else:
            annotation = Optional[kind] if f.default is None else kind
            param = command_param(f.name, Annotated[annotation, typer.Option(flag, help=help_of(f))], f.default)
            convert = _same
        out.append((f, param, convert))
    return out


def _same(value: Any) -> Any:
    return value


def _joined_list(values: list[str] | None, item: Callable, flag: str) -> tuple:
    return parse_list(",".join(values) if values else None, item=item, flag=flag)


def export_command(be) -> Callable:
    """`vitexport NAME`: the shared export options plus the backend's own."""
    flags = option_params(be.Options)
    shared = {p.name for p in EXPORT_PARAMS}
    clash = shared & {f.name for f, _, _ in flags}
    if clash:
        raise RuntimeError(f"{be.name}'s options reuse shared option names: {', '.join(sorted(clash))}")

    def command(**kwargs) -> None:
        from vitexport import api
        from vitexport.report.terminal import emit

        spec = source_spec(*(kwargs[p.name] for p in SOURCE_PARAMS))
        options = be.Options(**{f.name: convert(kwargs[f.name]) for f, _, convert in flags})
        as_json = kwargs["as_json"]
        gate = gate_of(kwargs["min_top1_agreement"], kwargs["max_accuracy_drop"], kwargs["task_gate"])
        with stdout_to_stderr(as_json), progress_for(kwargs["quiet"], as_json) as progress:
            result = api.export(be.name, spec, options, kwargs["out"], verify=not kwargs["no_verify"],
                                atol=kwargs["atol"], rtol=kwargs["rtol"], seed=kwargs["seed"], images=kwargs["images"],
                                name=kwargs["name"], gate=gate, force=kwargs["force"], progress=progress)
        emit(result, as_json)
        if result["status"] == "not-checked-here":
            published_unchecked(result)

    command.__signature__ = inspect.Signature(EXPORT_PARAMS + [p for _, p, _ in flags])
    command.__doc__ = be.summary
    command.__name__ = be.name
    return handle_errors(command)


def published_unchecked(result: dict) -> None:
    """Built and published, but this machine could not check it: say so and exit 3 (unavailable here,
    the check), never 0 as if it were verified, never 2 as if the input were bad."""
    from vitexport.cli.running import said
    from vitexport.core.errors import ExitCode

    artifact = result["artifact"]
    said(f"published unverified (not-checked-here): {artifact}: {result['parity']['skipped']}. Prove it on the "
         f"device: `vitexport package {artifact} --target DEVICE`, run the package's check there, then `vitexport "
         f"verify --device-report REPORT`; or `vitexport verify {artifact}` where it runs")
    raise typer.Exit(ExitCode.UNAVAILABLE)


def add_export_commands(app: typer.Typer) -> None:
    """One command per exporter, in the registry's order (the order `vitexport --help` lists them)."""
    for be in backends.exporters():
        app.command(be.name)(export_command(be))
