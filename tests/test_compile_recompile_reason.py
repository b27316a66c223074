"""compile: a layer's later graph names the guard that failed, as dynamo records it (TORCH_LOGS=recompiles prints the
same reason). The recipe's validation, run under no_grad after training steps, compiled a second graph at call
N + 1, and the line said only 'a guard of the earlier graphs failed (TORCH_LOGS=recompiles says which)'."""

import torch
import torch._dynamo
from torch import nn

from torchtune_longshort.training.compile_setup import CompiledCall, LayerCompile


class Layer(nn.Module):  # defined here: dynamo traces a module of torch.nn's own files (nn.Linear) as no graph
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x):
        return torch.relu(self.proj(x)) * 2


def test_a_later_graph_names_the_guard_that_failed():
    torch._dynamo.reset()
    notes = []
    layer = Layer()
    call = CompiledCall(layer, "layers.0", LayerCompile(note=notes.append, backend="eager"))
    x = torch.randn(2, 4)
    call(x).sum().backward()  # training: the first graph
    call(x)
    with torch.no_grad():  # validation: grad mode is a guard of the first graph
        call(x)
    later = [n for n in notes if "more graph" in n]
    assert len(later) == 1, notes
    # the reference: dynamo's own record of the failure (what TORCH_LOGS=recompiles prints)
    recorded = [r for reasons in torch._dynamo.utils.guard_failures.values() for r in reasons]
    assert any("grad_mode" in r for r in recorded), recorded
    assert later[0].startswith("compile: layers.0 compiled 1 more graph at its call 3 ("), later[0]
    assert later[0].endswith("): a guard of the earlier graphs failed (GLOBAL_STATE changed: grad_mode)"), later[0]
