"""The source of a small user model file (`--model FILE:make`), with the test's own code placed at
module level (`top`), in the factory or in `forward`: what the tests of a user's code failing write."""

from __future__ import annotations

import textwrap

SOURCE = '''
import os, signal, sys
import torch

class Net(torch.nn.Module):
    input_shape = (1, 3, 8, 8)

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x):
        {forward}
        return self.fc(x).mean(-1)

{top}

def make():
    {factory}
    return Net()
'''


def user_model(forward: str = "pass", top: str = "", factory: str = "pass") -> str:
    """The file's text; `forward` may span lines (it is indented into the method)."""
    body = textwrap.indent(textwrap.dedent(forward).strip(), " " * 8).strip()
    return SOURCE.format(top=top, factory=factory, forward=body)
