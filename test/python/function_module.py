"""The one test helper that turns a function into a module: most op tests
compile a lambda over their inputs."""

from torch import nn


class FunctionModule(nn.Module):
    """A module computing `function` of its inputs."""

    def __init__(self, function):
        super().__init__()
        self.function = function

    def forward(self, *inputs):
        return self.function(*inputs)
