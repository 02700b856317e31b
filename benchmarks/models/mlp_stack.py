"""ViT-B/16's MLP matrix multiplications and nothing else: 12 x (197x768 @ 768x3072, 197x3072 @ 3072x768).

Exported to ONNX and ExecuTorch (one XNNPACK call, nothing outside it), it times the runtimes' fp32
GEMM kernels alone: `benchmarks/executorch.sh` compares them to say how much of a ViT-B gap is the
GEMMs. The input is (N, 1, 197, 768): vitexport feeds NCHW tensors.
"""

import torch
from torch import nn


class MlpStack(nn.Module):
    input_shape = (1, 1, 197, 768)

    def __init__(self, depth: int = 12, width: int = 768, hidden: int = 3072):
        super().__init__()
        self.tokens, self.width = 197, width
        self.layers = nn.ModuleList(nn.Sequential(nn.Linear(width, hidden), nn.Linear(hidden, width))
                                    for _ in range(depth))

    def forward(self, x):
        x = x.reshape(x.shape[0], self.tokens, self.width)  # (n, 1, 197, 768) -> (n, 197, 768)
        for layer in self.layers:
            x = layer(x)
        return x


def make() -> nn.Module:
    torch.manual_seed(0)
    model = MlpStack()
    for p in model.parameters():  # small weights: 24 layers in a row neither explode nor vanish
        nn.init.normal_(p, std=0.02)
    return model
