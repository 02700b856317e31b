"""What there is to work with: `vitexport configs` (the built-in presets) and `vitexport doctor`
(what this machine can export and run with each backend, and why not)."""

from __future__ import annotations

import json

from vitexport.cli.options import JsonOpt
from vitexport.cli.running import handle_errors, progress_for, stdout_to_stderr


@handle_errors
def configs(as_json: JsonOpt = False) -> None:
    """List the built-in presets with parameter count and GFLOPs at their input size."""
    from vitexport.models.presets import PRESETS

    rows = [{"name": n, "image_size": list(c.image_hw), "patch_size": c.patch_size, "embed_dim": c.embed_dim,
             "depth": c.depth, "num_heads": c.num_heads, "mlp_dim": c.mlp_dim, "params_m": c.param_count() / 1e6,
             "gflops": c.gflops(), "pooling": c.pooling, "pos_embed": c.pos_embed, "activation": c.activation}
            for n, c in PRESETS.items()]
    if as_json:
        print(json.dumps({"presets": rows}, indent=2))
        return
    from vitexport.report.terminal import presets

    presets(rows)


@handle_errors
def doctor(as_json: JsonOpt = False) -> None:
    """What this machine can export and run with each backend, and why not; its CPU, GPU and libraries."""
    from vitexport.doctor import doctor as diagnose

    with stdout_to_stderr(as_json), progress_for(False, as_json) as progress:
        result = diagnose(progress)
    if as_json:
        print(json.dumps(result, indent=2, default=str))
        return
    from vitexport.report.doctor_view import doctor_report

    doctor_report(result)
