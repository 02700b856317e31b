"""Rewrites of an exported graph that let Core ML take a model it would otherwise refuse, computing
the same values: computations on parameters alone that Core ML cannot convert are done once
(vitexport.backends.coreml_common.constants), bicubic resizes become matrix products
(vitexport.backends.coreml_common.bicubic), `new_ones`-like nodes become `full` and `&`/`|` of
booleans the logical ops, `alias` nodes (a no-op view that coremltools' torch.export frontend cannot convert)
are dropped, and tensors of rank above Core ML's limit of 5 (Hiera's unroll/reroll, its 6-d qkv
split) are carried as rank <= 5 tensors in row-major order, each op on them written in that form.

What no rewrite covers raises RankLimitError naming the node; the caller decides what that means."""

from __future__ import annotations

import math

RANK_LIMIT = 5  # Core ML's MIL tensors have at most five dimensions


class RankLimitError(Exception):
    """A tensor above the rank limit that no rewrite here can carry."""

    def __init__(self, node, shape, why: str):
        where = _where(node)
        super().__init__(f"{node.target} ({node.name}{where}) makes a rank-{len(shape)} tensor "
                         f"{_shape_text(shape)}; Core ML allows rank <= {RANK_LIMIT}, and {why}")
        self.node_name, self.op = node.name, str(node.target)


def rewritten(program, example, dynamic_shapes=None):
    """(`program` exported again after the rewrites, {kind: count} of what was rewritten), or
    (`program`, {}) when it needs none. `dynamic_shapes` is positional (the rewritten graph names its
    input anew). Raises RankLimitError where no rewrite covers a tensor above the rank limit."""
    import torch

    from vitexport.backends.coreml_common.bicubic import as_matmuls, bicubic_nodes
    from vitexport.backends.coreml_common.constants import constant_nodes, fold_constants

    gm = program.graph_module
    inputs = set(program.graph_signature.user_inputs)
    if not (has_aliases(gm) or has_high_rank(gm) or _mixed_copies(gm) or constant_nodes(gm, inputs)
            or bicubic_nodes(gm) or _new_tensors(gm) or _bool_bitwise(gm)):
        return program, {}
    module = program.module()  # a plain graph to rewrite, then export again (shapes and guards recomputed)
    # Constants first: a resize of parameters is computed once; a resize of an activation becomes matmuls.
    done = {kind: n for kind, n in (("constant_folded", fold_constants(module, example)),
                                    ("bicubic_as_matmul", as_matmuls(module)),
                                    ("alias_removed", drop_aliases(module)), ("copy_cast", cast_copies(module)),
                                    ("new_as_full", new_as_full(module)), ("bool_as_logical", bool_as_logical(module)),
                                    ("rank_folded", fold_high_rank(module))) if n}
    if not done:
        return program, {}
    return torch.export.export(module, (example,), dynamic_shapes=dynamic_shapes), done


def _aliases(gm) -> list:
    import torch

    return [n for n in gm.graph.nodes if n.op == "call_function"
            and n.target in (torch.ops.aten.alias.default, torch.ops.aten.alias_copy.default)]


def has_aliases(gm) -> bool:
    return bool(_aliases(gm))


def drop_aliases(gm) -> int:
    """Replace every `aten.alias` (a view of the whole tensor, e.g. Swin's `x[:, :H, :W]` at full size)
    by its input; return how many there were."""
    aliases = _aliases(gm)
    for node in aliases:
        node.replace_all_uses_with(node.args[0])
        gm.graph.erase_node(node)
    if aliases:
        gm.recompile()
    return len(aliases)


def _new_tensors(gm) -> list:
    """`new_ones`/`new_zeros`/`new_full` (DETR's pixel mask): a tensor made from another's dtype alone,
    for which coremltools' frontend has no converter; `full` it has."""
    import torch

    a = torch.ops.aten
    return [n for n in gm.graph.nodes if n.op == "call_function"
            and n.target in (a.new_ones.default, a.new_zeros.default, a.new_full.default)]


def new_as_full(gm) -> int:
    """Write each of `_new_tensors(gm)` as `aten.full` of its size, value and dtype; return how many."""
    import torch

    a = torch.ops.aten
    nodes = _new_tensors(gm)
    for node in nodes:
        source, size = node.args[0], node.args[1]
        value = node.args[2] if node.target is a.new_full.default else (1 if node.target is a.new_ones.default else 0)
        dtype = node.kwargs.get("dtype") or _dtype(source)
        with gm.graph.inserting_before(node):
            full = gm.graph.call_function(a.full.default, (size, value), {"dtype": dtype})
        full.meta.update(node.meta)
        node.replace_all_uses_with(full)
        gm.graph.erase_node(node)
    if nodes:
        gm.recompile()
    return len(nodes)


def _bitwise_to_logical():
    import torch

    a = torch.ops.aten
    return {a.__and__.Tensor: a.logical_and.default, a.bitwise_and.Tensor: a.logical_and.default,
            a.__or__.Tensor: a.logical_or.default, a.bitwise_or.Tensor: a.logical_or.default}


def _bool_bitwise(gm) -> list:
    """`&` and `|` of boolean tensors (transformers' attention masks), which coremltools' frontend
    lacks; on booleans they are the logical ops it has."""
    import torch

    ops = _bitwise_to_logical()
    return [n for n in gm.graph.nodes if n.op == "call_function" and n.target in ops
            and all(_dtype(x) is torch.bool for x in n.args[:2])]


def bool_as_logical(gm) -> int:
    nodes = _bool_bitwise(gm)
    ops = _bitwise_to_logical()
    for node in nodes:
        node.target = ops[node.target]
    if nodes:
        gm.recompile()
    return len(nodes)


def _mixed_copies(gm) -> list:
    """`aten.copy` nodes whose source has another dtype than their destination (ConViT writes integer
    positions into a float tensor): torch casts there, coremltools passes the source on as it is."""
    import torch

    return [n for n in gm.graph.nodes if n.op == "call_function" and n.target is torch.ops.aten.copy.default
            and _dtype(n.args[0]) is not None and _dtype(n.args[1]) not in (None, _dtype(n.args[0]))]


def cast_copies(gm) -> int:
    """Cast the source of every mixed-dtype `aten.copy` to its destination's dtype, as torch does."""
    import torch

    mixed = _mixed_copies(gm)
    for node in mixed:
        with gm.graph.inserting_before(node):
            cast = gm.graph.call_function(torch.ops.aten._to_copy.default, (node.args[1],),
                                          {"dtype": _dtype(node.args[0])})
        node.args = (node.args[0], cast, *node.args[2:])
    if mixed:
        gm.recompile()
    return len(mixed)


def _dtype(arg):
    value = arg.meta.get("val") if hasattr(arg, "meta") else None
    return getattr(value, "dtype", None)


def has_high_rank(gm, limit: int = RANK_LIMIT) -> bool:
    return any(len(_shape(n)) > limit for n in gm.graph.nodes if n.op == "call_function" and _shape(n) is not None)


def fold_high_rank(gm, limit: int = RANK_LIMIT) -> int:
    """Carry every tensor of rank above `limit` as a rank <= `limit` tensor holding the same values in
    row-major order, rewriting the views, permutes, selections and reductions made on it; return how
    many nodes were rewritten. Raises RankLimitError at the first node no rewrite covers."""
    return _Folder(gm, limit).run()


class _Folder:
    def __init__(self, gm, limit: int):
        import torch

        self.gm, self.graph, self.limit, self.aten = gm, gm.graph, limit, torch.ops.aten
        self.carried: dict = {}  # node of rank > limit -> (node holding its values, its logical shape)
        self.rewritten = 0

    def run(self) -> int:
        a = self.aten
        views = (a.view.default, a._unsafe_view.default, a.reshape.default)
        same = (a.clone.default, a.contiguous.default, a.alias.default)
        reductions = (a.amax.default, a.amin.default, a.sum.dim_IntList, a.mean.dim)
        for node in list(self.graph.nodes):
            if node in self.carried:  # already rewritten with the node that made it (unbind's items)
                continue
            if node.op != "call_function":
                if node.op == "output" and any(arg in self.carried for arg in node.all_input_nodes):
                    src = next(arg for arg in node.all_input_nodes if arg in self.carried)
                    raise RankLimitError(src, self.carried[src][1], "the model returns it")
                continue
            shape = _shape(node)
            inputs = [arg for arg in node.all_input_nodes if arg in self.carried]
            source = node.args[0] if inputs and node.args[0] is inputs[0] else None
            high = shape is not None and len(shape) > self.limit
            if not high and not inputs:
                continue
            if len(inputs) > 1 or (inputs and source is None):
                raise RankLimitError(inputs[0], self.carried[inputs[0]][1],
                                     f"{node.target} takes it beside other tensors (no rewrite applies)")
            if node.target in views:
                self._view(node, shape, source)
            elif source is not None and node.target in same:
                self._keep(node, source)
            elif source is not None and node.target is a.permute.default:
                self._permute(node, source, node.args[1])
            elif source is not None and node.target is a.transpose.int:  # a permute of two axes (Twins)
                rank = len(self.carried[source][1])
                order = list(range(rank))
                first, second = (d % rank for d in node.args[1:3])
                order[first], order[second] = second, first
                self._permute(node, source, order)
            elif source is not None and node.target in (a.unbind.int, a.select.int):
                self._select(node, source)
            elif source is not None and node.target in reductions:
                self._reduce(node, source)
            elif source is not None and node.target is a.linear.default:
                self._last_axis(node, source)
            else:
                what = _shape(source) if source is not None else shape
                raise RankLimitError(source if source is not None else node, what,
                                     f"no rewrite applies to {node.target} on it")
            self.rewritten += 1
        self.graph.eliminate_dead_code()
        self.graph.lint()
        self.gm.recompile()
        return self.rewritten

    # -- the ops --------------------------------------------------------------------------------
    def _view(self, node, shape, source) -> None:
        if len(shape) > self.limit:  # carried: the values in row-major order, any rank <= limit
            held = self._reshape(node, self._held(node.args[0]), _merged(shape, self.limit), node)
            self._carry(node, held, shape)
        else:  # back below the limit: a reshape of what carried it (which may not be contiguous)
            held = self.carried[source][0]
            with self.graph.inserting_before(node):
                new = self._contiguous(self.graph.call_function(self.aten.reshape.default, (held, node.args[1])))
            node.replace_all_uses_with(new)

    def _keep(self, node, source) -> None:
        self.carried[node] = self.carried[source]

    def _permute(self, node, source, dims) -> None:
        held, shape = self.carried[source]
        order = [d % len(shape) for d in dims]
        with self.graph.inserting_before(node):
            for first, second in _transpositions(order):
                # Swap two axes with everything between them merged: (pre, a, mid, b, post) is rank 5.
                dims = [_prod(shape[:first]), shape[first], _prod(shape[first + 1:second]), shape[second],
                        _prod(shape[second + 1:])]
                held = self._reshape_here(held, dims, node)
                held = self.graph.call_function(self.aten.permute.default, (held, [0, 3, 2, 1, 4]))
                shape = [*shape[:first], shape[second], *shape[first + 1:second], shape[first], *shape[second + 1:]]
        self._carry(node, held, shape)

    def _select(self, node, source) -> None:
        held, shape = self.carried[source]
        dim = node.args[1] % len(shape) if len(node.args) > 1 else 0
        picks = [(node, node.args[2])] if node.target is self.aten.select.int else \
            [(user, user.args[1]) for user in list(node.users)]  # unbind: its getitem users
        for target, index in picks:
            with self.graph.inserting_before(target):
                split = self._reshape_here(held, [_prod(shape[:dim]), shape[dim], _prod(shape[dim + 1:])], node)
                picked = self.graph.call_function(self.aten.select.int, (split, 1, index))
            self._result(target, picked, [*shape[:dim], *shape[dim + 1:]])

    def _reduce(self, node, source) -> None:
        held, shape = self.carried[source]
        dims = node.args[1] if len(node.args) > 1 else None
        keepdim = node.args[2] if len(node.args) > 2 else node.kwargs.get("keepdim", False)
        if not dims or len(dims) != 1 or set(node.kwargs) - {"keepdim"}:
            raise RankLimitError(source, shape, f"{node.target} reduces it over {dims} (one axis is rewritten)")
        dim = dims[0] % len(shape)
        with self.graph.inserting_before(node):
            split = self._reshape_here(held, [_prod(shape[:dim]), shape[dim], _prod(shape[dim + 1:])], node)
            reduced = self.graph.call_function(node.target, (split, [1]))
        rest = [*shape[:dim], *([1] if keepdim else []), *shape[dim + 1:]]
        self._result(node, reduced, rest)

    def _last_axis(self, node, source) -> None:
        """An op on the last axis alone (a Linear, as Twins applies to its windows): the rows it reads
        lie whole in the row-major order the tensor is held in."""
        held, shape = self.carried[source]
        with self.graph.inserting_before(node):
            rows = self._reshape_here(held, [-1, shape[-1]], node)
            value = self.graph.call_function(node.target, (rows, *node.args[1:]), dict(node.kwargs))
        self._result(node, value, _shape(node))

    # -- helpers --------------------------------------------------------------------------------
    def _result(self, node, value, shape) -> None:
        """`node` now computes `value` (its elements in row-major order) of logical `shape`."""
        if len(shape) > self.limit:
            self._carry(node, value, shape)
            return
        with self.graph.inserting_before(node):
            new = self._contiguous(self._reshape_here(value, shape, node))
        node.replace_all_uses_with(new)

    def _carry(self, node, held, shape) -> None:
        self.carried[node] = (held, list(shape))  # its users are rewritten in turn; then it is dead code

    def _contiguous(self, value):
        """A real tensor handed back to the graph is contiguous: the views the model makes of it next
        were written for a tensor its own ops made (Core ML converts the copy as nothing)."""
        import torch

        return self.graph.call_function(self.aten.clone.default, (value,), {"memory_format": torch.contiguous_format})

    def _held(self, value):
        return self.carried[value][0] if value in self.carried else value

    def _reshape(self, before, value, dims, node):
        with self.graph.inserting_before(before):
            return self._reshape_here(value, dims, node)

    def _reshape_here(self, value, dims, node):
        return self.graph.call_function(self.aten.reshape.default, (value, _static(dims, node)))


def _transpositions(order: list[int]) -> list[tuple[int, int]]:
    """Swaps of two positions that turn range(n) into `order` (a selection sort: at most n - 1)."""
    current, swaps = list(range(len(order))), []
    for i, want in enumerate(order):
        j = current.index(want)
        if j != i:
            swaps.append((i, j))
            current[i], current[j] = current[j], current[i]
    return swaps


def _merged(shape, limit: int) -> list:
    """`shape` with its trailing dimensions merged into one so it has `limit` dimensions."""
    return [*shape[:limit - 1], _prod(shape[limit - 1:])]


def _prod(dims):
    """Product of dimensions; None when one of them is symbolic (a dynamic batch)."""
    if any(not isinstance(d, int) for d in dims):
        return None
    return math.prod(dims)


def _static(dims, node) -> list[int]:
    """Reshape sizes: a symbolic one (None, or a SymInt) becomes -1, which only one may be."""
    out = [d if isinstance(d, int) else -1 for d in dims]
    if out.count(-1) > 1:
        raise RankLimitError(node, dims, "its dynamic sizes cannot be folded into one")
    return out


def _shape(node):
    value = node.meta.get("val") if hasattr(node, "meta") else None
    shape = getattr(value, "shape", None)
    return None if shape is None else [_size(d) for d in shape]


def _size(d):
    """A dimension as an int, or the SymInt of a dynamic size (never forced to a value: that would
    specialise the export)."""
    if isinstance(d, int):
        return d
    known = getattr(getattr(d, "node", None), "maybe_as_int", lambda: None)()
    return known if known is not None else d


def _shape_text(shape) -> str:
    return "(" + ", ".join(str(d) if isinstance(d, int) else "batch" for d in shape) + ")"


def _where(node) -> str:
    """The model line that made `node`, from torch.export's stack trace."""
    trace = (node.meta.get("stack_trace") or "").strip().splitlines()
    return f", from `{trace[-1].strip()}`" if trace else ""
