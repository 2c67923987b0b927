"""The memory stage: temporaries in one planned workspace, copies as loops.
Checked against eager on fresh inputs, twice in a row (a workspace reused
by the next call must not leak values into it)."""

import torch
from conftest import compile_on_threads


class Temporaries(torch.nn.Module):
    """Several temporaries, some live together, some after others are dead."""
    def forward(self, x):
        a = torch.relu(x @ x.T) * 0.1
        b = torch.softmax(a, -1) + x.mean()
        c = torch.tanh(b @ x)
        return c * 2 + torch.cat([x[:, :3], c[:, 3:]], dim=1)


class PermutedSlice(torch.nn.Module):
    """bf16 through a permuted copy and a slice of it (found by the fuzzer:
    as workspace views LLVM's x86 backend aborted on these bf16 copies)."""
    def forward(self, x, unused):
        return x.permute((2, 0, 1))[4::1]


def test_workspace_temporaries_match_eager_call_after_call():
    x = torch.randn(64, 48)
    compiled, _ = compile_on_threads(Temporaries(), (x,), threads=2)
    assert "twintrack.workspace_bytes" in compiled.compilation.text("memory")
    for _ in range(2):
        fresh = torch.randn_like(x)
        expected = Temporaries()(fresh.double())
        torch.testing.assert_close(compiled(fresh).double(), expected, rtol=1e-4, atol=1e-4)


def test_bfloat16_permuted_slice_compiles_and_runs():
    inputs = (torch.randn(5, 3, 5).bfloat16(), torch.randn(5, 1))
    compiled, _ = compile_on_threads(PermutedSlice(), inputs)
    torch.testing.assert_close(compiled(*inputs), PermutedSlice()(*inputs), rtol=0, atol=0)
