"""The building blocks of every schema: the base model (strict types, finite numbers, extra keys
ignored) and the kinds of values vitexport's files hold, each with its range."""

from __future__ import annotations

import math
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field
from pydantic_core import PydanticCustomError

# Beyond a day per call a latency is not a measurement but a typo or a broken writer.
MAX_MS = 86_400_000.0
# A bound for numbers no unit of vitexport's reaches (GFLOP/s, bytes, MB, seconds): past it a value is
# a typo or an attack, and would overflow the arithmetic of the pages that draw it (1e308 * 10 is inf).
HUGE = 1e15
# An output's error can be as large as a float32 output, never more.
MAX_ERROR = 1e39


class Record(BaseModel):
    """A JSON object of one of vitexport's files. Strict: "2" is not a number, true is not 1. Keys this
    version does not know are let through and ignored: a newer vitexport of the same schema version
    only adds keys, and a change that would mislead an older reader changes the schema version."""

    model_config = ConfigDict(strict=True, extra="allow", allow_inf_nan=False, hide_input_in_errors=False)


def _fmt(number: float) -> str:
    return f"{number:g}"


def within_check(value, low: float, high: float, above: bool = False):
    """`value` when it lies in [low, high] (or (low, high]); else the error every range check raises."""
    if isinstance(value, float) and not math.isfinite(value):
        raise PydanticCustomError("finite_number", "{value} is not a finite number", {"value": _fmt(value)})
    if (value <= low if above else value < low) or value > high:
        interval = f"{'(' if above else '['}{_fmt(low)}, {_fmt(high)}]"
        raise PydanticCustomError("range", "{value} is not within {interval}",
                                  {"value": _fmt(value) if isinstance(value, float) else value, "interval": interval})
    return value


def within(low: float, high: float, kind: type = float, *, above: bool = False) -> Any:
    """A number of `kind` in [low, high] (or (low, high] with `above`), published as minimum/maximum."""
    def check(value):
        return within_check(value, low, high, above)

    bound = {"exclusiveMinimum" if above else "minimum": low, "maximum": high}
    return Annotated[kind, AfterValidator(check), Field(json_schema_extra=bound)]


Ms = within(0, MAX_MS, above=True)  # a time a runtime took, in milliseconds
Spread = within(0, MAX_MS)  # a spread of times, or a time that may be 0
Seconds = within(0, HUGE)
Cosine = within(-1.000001, 1.000001)  # [-1, 1], and the last bit of rounding (1.0000000000000002)
Share = within(0.0, 1.0)  # a fraction: an agreement, an accuracy
Ratio = within(0.0, HUGE)  # a non-negative ratio (a coefficient of variation, a roofline share)
Amount = within(0.0, HUGE)  # GFLOP/s, MB, GHz: a non-negative quantity
Error = within(0.0, MAX_ERROR)  # an absolute error between outputs
Tolerance = within(0.0, 1e6)
Number = within(-HUGE, HUGE)  # any finite number of reasonable size
Count = within(0, 2**63 - 1, int)
Size = within(1, 2**31 - 1, int)  # a batch size, a thread count


def _measured(value: float) -> float:
    if value < -1e-6:  # a KL divergence computed in floats can come out a rounding error below 0
        raise PydanticCustomError("range", "{value} is below 0", {"value": _fmt(value)})
    return value


# A measured error that may be infinite or NaN: a candidate that computed non-finite outputs is
# recorded as such in its sidecar (and fails), never rewritten into a number.
ErrorOrNonFinite = Annotated[float, Field(allow_inf_nan=True), AfterValidator(_measured)]
CosineOrNaN = Annotated[float, Field(allow_inf_nan=True, json_schema_extra={"minimum": -1.000001, "maximum": 1.000001}),
                        AfterValidator(lambda v: v if v != v else within_check(v, -1.000001, 1.000001))]
Sha256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
