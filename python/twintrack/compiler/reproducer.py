"""Reproducers: the IR a failing stage got, plus one shell command that
reproduces the failure outside twintrack."""

from __future__ import annotations

import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from ..tooling import find_tool


@dataclass(frozen=True)
class Reproducer:
    stage: str
    input_ir: str
    command: str          # refers to the input by `input_name`
    diagnostics: str
    input_name: str = "input.mlir"

    @staticmethod
    def for_pipeline(stage: str, tool: str, pipeline: str, input_ir: str, diagnostics: str) -> "Reproducer":
        binary = find_tool(tool) or tool
        command = f"{shlex.quote(binary)} --pass-pipeline={shlex.quote(pipeline)} input.mlir"
        return Reproducer(stage, input_ir, command, diagnostics)

    @staticmethod
    def for_python_passes(stage: str, pass_names: list[str], input_ir: str, diagnostics: str) -> "Reproducer":
        command = f"{shlex.quote(sys.executable)} -m twintrack.compiler.passes {shlex.quote(','.join(pass_names))} input.mlir"
        return Reproducer(stage, input_ir, command, diagnostics)

    def write(self, directory: Path) -> Path:
        directory.mkdir(parents=True, exist_ok=True)
        (directory / self.input_name).write_text(self.input_ir)
        (directory / "command.sh").write_text(
            f"#!/bin/sh\n# Reproduces the failure of stage '{self.stage}'. Run from this directory.\n{self.command}\n")
        (directory / "command.sh").chmod(0o755)
        (directory / "error.txt").write_text(self.diagnostics + "\n")
        return directory
