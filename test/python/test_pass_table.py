"""The Python pass table names each pass by the class that carries that name,
and a recipe's passes are importable by it."""

import pytest

from twintrack.errors import UsageError
from twintrack.compiler.passes import PASSES, instantiate, pass_class, pass_name
from twintrack.compiler.recipes import available_pipelines, load_recipe


@pytest.mark.parametrize("name", sorted(PASSES))
def test_each_name_is_its_class_name(name):
    assert pass_class(name).name == name


def test_every_recipe_pass_is_in_the_table():
    for pipeline in available_pipelines():
        for stage in load_recipe(pipeline).stages:
            for spec in stage.python_passes:
                assert pass_class(pass_name(spec)).name == pass_name(spec)


def test_an_unknown_pass_is_named():
    with pytest.raises(UsageError, match="unknown Python pass no-such-pass"):
        instantiate("no-such-pass")
