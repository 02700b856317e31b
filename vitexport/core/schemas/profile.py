"""The `profile` of a bench report's row (`bench --profile`): where the row's time went by its runtime's
own profiler, per operator class, or why it was not profiled. Part of `vitexport.bench/1`."""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field, model_validator

from vitexport.core.schemas.fields import Count, Ms, Ratio, Record, Spread

# The operator classes of `bench --profile` (vitexport.bench.opclasses.CLASSES, in its order).
OP_CLASSES = Literal["matmul", "attention", "norm", "activation", "quantize", "layout", "other"]


class ProfileClass(Record):
    op_class: OP_CLASSES = Field(alias="class")
    label: str
    ms: Spread
    share: Optional[Ratio] = None  # of the row's p50


class ProfileOpType(Record):
    op_type: str
    op_class: OP_CLASSES = Field(alias="class")
    ms: Spread
    count: Count


class ProfileOp(Record):
    name: str
    op_type: str
    op_class: OP_CLASSES = Field(alias="class")
    ms: Spread
    share: Optional[Ratio] = None


class Profile(Record):
    """`bench --profile`: where a row's time went by its runtime's own profiler, or why it was not profiled."""

    available: bool
    reason: Optional[str] = None
    runtime: Optional[str] = None
    runs: Optional[Count] = None
    operators: Optional[Count] = None
    total_ms: Optional[Spread] = None  # the classes' sum: every operator in one class
    p50_ms: Optional[Ms] = None
    accounted: Optional[Ratio] = None  # total_ms / p50_ms
    profiled_run_ms: Optional[Ms] = None  # the profiled runs' mean wall time: what the profiler itself cost
    classes: list[ProfileClass] = []
    op_types: list[ProfileOpType] = []
    top: list[ProfileOp] = []

    @model_validator(mode="after")
    def _whole(self):
        if self.available and (self.runtime is None or self.total_ms is None or not self.classes):
            raise ValueError("a profile that ran names its runtime, its total and its classes")
        if not self.available and not self.reason:
            raise ValueError("a profile that did not run says why")
        return self
