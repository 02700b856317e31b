"""The evaluator's one error: an op it does not implement."""


class UnsupportedOpError(Exception):
    """An op (or an op's mode) that the evaluator does not implement; the message names it."""

    def __init__(self, op_type: str, name: str = "", detail: str = ""):
        where = f" (at {name})" if name else ""
        extra = f": {detail}" if detail else ""
        super().__init__(f"the Core ML evaluator does not implement op {op_type!r}{extra}{where}")
        self.op_type = op_type
