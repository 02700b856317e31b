"""An artifact whose model has a constant head (a zero-initialised classifier) also returns what it
feeds that head, for backends whose artifact keeps no internal tensor anyone can read back (an
ExecuTorch program's delegate, a LiteRT flatbuffer's XNNPACK partition compute it inside one call):
the check of a constant output could otherwise only pass vacuously. The extra output comes after the
model's own, which keep their names and order; runners return the named outputs only."""

from __future__ import annotations

from vitexport.core.errors import ExportError


def pre_head_of(loaded, example) -> str | None:
    """The module path of the head that makes the model's output constant for `example`, when what
    it reads carries information; None otherwise (or when the model has several outputs)."""
    from vitexport.models.heads import Head, constant_head
    from vitexport.models.tracing import export_mode

    if loaded.output_names:
        return None
    with export_mode():
        head = constant_head(loaded.model, example.float().numpy())
    return head.path if isinstance(head, Head) else None


def with_pre_head(model, head: str):
    """`model` returning (its output, the input of the module at `head`)."""
    import torch

    class WithPreHead(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, x):
            seen = []
            hook = self.model.get_submodule(head).register_forward_pre_hook(lambda _m, args: seen.append(args[0]))
            try:
                y = self.model(x)
            finally:
                hook.remove()
            if len(seen) != 1:
                raise ExportError(f"the head {head} ran {len(seen)} times in one forward; expected once")
            return y, seen[0]

    return WithPreHead()
