# lit configuration for twintrack's FileCheck tests.
#
# Run from the repository root with the venv's lit (its Python is the venv's):
#   .venv/bin/lit -v test/lowering
# (this lit has no __main__, so `python -m lit` does not work; use
#  `.venv/bin/python .venv/bin/lit ...` to pick the interpreter explicitly.)
#
# Every stage of lowering/cpu.toml is available as a substitution,
# `%stage-<name>`, that runs exactly that stage's pipeline (or Python passes)
# as written in the recipe, so the tests always exercise the real recipe:
#   // RUN: %stage-fusion %s | FileCheck %s
# Tools are found from the running Python (the venv): torch-mlir-opt next to
# sys.executable, mlir-opt and FileCheck in the `mlir` / `llvm` wheels.

import os
import shlex
import sys

import lit.formats
import lit.util

config.name = "twintrack"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".mlir"]
config.excludes = ["Output", "python", "lit.cfg.py"]

config.test_source_root = os.path.dirname(os.path.abspath(__file__))
config.test_exec_root = os.path.join(config.test_source_root, "Output")

repo_root = os.path.dirname(config.test_source_root)
python_dir = os.path.join(repo_root, "python")


def _package_bin(package):
    """<package>/bin of an installed wheel (mlir, llvm), or None."""
    try:
        module = __import__(package)
    except ImportError:
        return None
    for root in getattr(module, "__path__", []):
        candidate = os.path.join(root, "bin")
        if os.path.isdir(candidate):
            return candidate
    return None


def _find_tool(name, directories):
    for directory in directories:
        if directory and os.path.isfile(os.path.join(directory, name)) \
                and os.access(os.path.join(directory, name), os.X_OK):
            return os.path.join(directory, name)
    found = lit.util.which(name)
    if found is None:
        lit_config.fatal(f"cannot find {name} (looked in: {', '.join(d for d in directories if d)} and PATH)")
    return found


python = sys.executable
python_bin = os.path.dirname(python)
mlir_bin = _package_bin("mlir")
llvm_bin = _package_bin("llvm")
search = [python_bin, mlir_bin, llvm_bin]

# twintrack-opt is built by `pip install -e .` (CMakeLists.txt) into the venv's bin.
tools = {name: _find_tool(name, search) for name in ("mlir-opt", "torch-mlir-opt", "FileCheck", "twintrack-opt")}

# Tools on PATH for RUN lines, the venv's bin first.
path_dirs = [d for d in (python_bin, mlir_bin, llvm_bin) if d]
config.environment["PATH"] = os.pathsep.join(path_dirs + [os.environ.get("PATH", "")])
config.environment["PYTHONPATH"] = os.pathsep.join(
    [python_dir] + [p for p in [os.environ.get("PYTHONPATH")] if p])

config.substitutions.append(("%PYTHON", shlex.quote(python)))
config.substitutions.append(("%mlir-opt", shlex.quote(tools["mlir-opt"])))
config.substitutions.append(("%torch-mlir-opt", shlex.quote(tools["torch-mlir-opt"])))
config.substitutions.append(("%FileCheck", shlex.quote(tools["FileCheck"])))
config.substitutions.append(("%twintrack-opt", shlex.quote(tools["twintrack-opt"])))

# One substitution per recipe stage, from the real recipes (every target).
sys.path.insert(0, python_dir)
from twintrack.compiler.recipes import DEFAULT_LOWERING_DIR, PipelineVariables, available_pipelines, load_recipe  # noqa: E402

stage_commands = {}
for target in available_pipelines(DEFAULT_LOWERING_DIR):
    for stage in load_recipe(target, DEFAULT_LOWERING_DIR, PipelineVariables()).stages:
        if stage.python_passes:
            command = [python, "-m", "twintrack.compiler.passes", ",".join(stage.python_passes)]
        else:
            if stage.tool not in tools:
                tools[stage.tool] = _find_tool(stage.tool, search)
            command = [tools[stage.tool], f"--pass-pipeline={stage.pipeline}"]
        command = " ".join(shlex.quote(part) for part in command)
        if stage_commands.setdefault(stage.name, command) != command:
            lit_config.fatal(f"stage '{stage.name}' differs between recipes; give it a distinct name")

# Ahead of the other substitutions, longest names first, so that no stage name
# shadows another that it prefixes.
config.substitutions[0:0] = [(f"%stage-{name}", stage_commands[name])
                             for name in sorted(stage_commands, key=len, reverse=True)]

config.available_features.update(f"stage-{name}" for name in stage_commands)
