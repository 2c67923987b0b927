"""The one test helper that turns a function into a module: most op tests
compile a lambda over their inputs."""

from torch import nn
from torch.fx.proxy import _register_stack_trace_anchor


class FunctionModule(nn.Module):
    """A module computing `function` of its inputs. The function's frame is
    kept in the exported stack traces (torch.export keeps only `forward`
    frames otherwise), so errors name the test's line as they would a
    model's own forward."""

    def __init__(self, function):
        super().__init__()
        _register_stack_trace_anchor(function)
        self.function = function

    def forward(self, *inputs):
        return self.function(*inputs)
