"""twintrack.explain and tools/explain.py: Dynamo's graphs and their ops,
each graph break with its reason and the model's source line, each
recompile with the guard that failed; the model still runs, in pieces."""

import inspect

import torch

import twintrack


class TwoBreaks(torch.nn.Module):
    """A print and a branch on the data cut it in three graphs; its first call sets a flag the guards read."""

    def __init__(self):
        super().__init__()
        self.first, self.second = torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)
        self.mode = None

    def forward(self, x):
        y = torch.relu(self.first(x))
        print("cut here")
        if y.sum() > 0:
            y = y * 2
        if self.mode is None:
            self.mode = "seen"
        return self.second(y)


def _line(text: str) -> int:
    source, start = inspect.getsourcelines(TwoBreaks.forward)
    return start + next(i for i, line in enumerate(source) if text in line)


def test_explain_names_the_breaks_and_the_recompile(capsys):
    model = TwoBreaks()
    report = twintrack.explain(model, torch.randn(3, 8), calls=[(torch.randn(3, 8),)])
    assert "cut here" in capsys.readouterr().out  # the model ran
    first_call = [g for g in report.graphs if g.call == 0]
    assert len(first_call) == 3
    assert [name for name, _ in first_call[0].ops] == ["linear", "relu"]
    assert len(report.breaks) == 2
    printed, branched = report.breaks
    assert printed.where.endswith(f":{_line('print(')} in forward") and printed.code == 'print("cut here")'
    assert "print" in printed.reason
    assert f":{_line('if y.sum()')} " in branched.where and "depends on the data" in branched.reason
    (recompile,) = report.recompiles
    assert recompile.call == 1 and recompile.guards[0][0] == "self.mode is None"
    assert f":{_line('if self.mode')} " in recompile.guards[0][1]
    text = report.text()
    assert text.startswith("4 graph(s), 2 graph break(s), 1 recompile(s) over 2 call(s)")


def test_explain_tool(run_tool, tmp_path):
    result = run_tool("explain", "zoo:mlp?batch=4&features=8&hidden=16&out=4", "--json", tmp_path / "r.json")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("1 graph(s), 0 graph break(s), 0 recompile(s) over 2 call(s)")
    assert "linear x3" in result.stdout and (tmp_path / "r.json").is_file()


def test_explain_tool_names_a_bad_model(run_tool):
    result = run_tool("explain", "zoo:nosuchmodel")
    assert result.returncode == 2 and "nosuchmodel" in result.stderr and len(result.stderr.strip().splitlines()) == 1
