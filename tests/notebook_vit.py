"""A small ViT as a notebook defines it: a class written in a cell, nowhere importable by name later.

`make()` builds it with seeded weights whose outputs depend on the input (a zero or tiny head would
make every check vacuous)."""

from __future__ import annotations

import torch
from torch import nn


def make(seed: int = 0, image: int = 32, patch: int = 8, dim: int = 32, classes: int = 10) -> nn.Module:
    class NotebookViT(nn.Module):  # defined inside a function: its class cannot be imported by name
        def __init__(self):
            super().__init__()
            self.patch = nn.Conv2d(3, dim, patch, patch)
            self.pos = nn.Parameter(torch.randn(1, (image // patch) ** 2, dim) * 0.5)
            self.attn = nn.MultiheadAttention(dim, 4, batch_first=True)
            self.norm = nn.LayerNorm(dim)
            self.drop = nn.Dropout(0.2)
            self.head = nn.Linear(dim, classes)

        def forward(self, x):
            t = self.patch(x).flatten(2).transpose(1, 2) + self.pos
            t = t + self.drop(self.attn(t, t, t, need_weights=False)[0])
            return self.head(self.norm(t).mean(1))

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = NotebookViT()
    return model
