"""Graph nodes' histories are shared, not copied, while an export runs, and say the same thing."""

import copy

import torch
from torch.fx import traceback

from vitexport.models.tracing import export_mode, shared_node_history


class Small(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.norm, self.fc = torch.nn.LayerNorm(8), torch.nn.Linear(8, 4)

    def forward(self, x):
        return torch.nn.functional.gelu(self.fc(self.norm(x))).softmax(-1)


def history_of(program) -> dict:
    """Each node's provenance, without the graph ids (a graph's id differs from run to run)."""
    def plain(entry):
        return {k: [plain(e) for e in v] if k == "from_node" else v for k, v in entry.items() if k != "graph_id"}

    return {n.name: [plain(s.to_dict()) for s in n.meta.get("from_node", [])] for n in program.graph.nodes}


def decomposed():
    program = torch.export.export(Small().eval(), (torch.randn(2, 8),))
    return program.run_decompositions()  # every node replaced: a history one level deeper


def test_a_history_is_copied_outside_the_block_and_shared_inside():
    node = torch.fx.Graph().placeholder("x")
    node.meta["from_node"] = [traceback.NodeSource(None, "made")]
    source = traceback.NodeSource(node, "pass")
    assert copy.deepcopy(source) is not source
    with shared_node_history():
        with shared_node_history():
            pass
        assert copy.deepcopy(source) is source  # nested: the inner block's end keeps the outer's setting
        with export_mode():
            assert copy.deepcopy(source) is source
    assert copy.deepcopy(source) is not source and "__deepcopy__" not in vars(traceback.NodeSource)


def test_the_histories_say_the_same_shared_or_copied():
    copied = history_of(decomposed())
    with export_mode():
        shared = history_of(decomposed())
    assert shared == copied and any(copied.values())
