"""A coverage worker: `python -m twintrack.harness.coverage.worker`.

It reads one JSON request per line on stdin and answers one JSON line per
request on the stdout it started with. Everything else the process prints
(MLIR dumps, warnings, a C library's chatter) goes to stderr instead, so it
can never corrupt the answers. A crash kills only this process; the pool
records the signal and starts another worker.

Requests: {"case": ID, "samples": N, "target": "cpu"|"gpu", "artifacts": DIR|null},
or the fuzzer's {"case": ID, "fuzz": SOURCE, "target": ...} (twintrack.harness.fuzz.check).
The worker first answers {"ready": true} once its imports and a warm-up
compile are done, so that neither the pool's per-case timeout nor the
first case's compile time counts them.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def _protocol_stream():
    """A private copy of stdout for the answers; fd 1 then points at stderr."""
    stream = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return stream


def _warm_up() -> None:
    """Pay the imports (torch-mlir, op_db) and a first compile's one-time
    setup before the first case is timed: a case's compile time is then
    its own, whichever worker ran it."""
    import torch

    import twintrack
    from . import cases
    cases.op_index()
    twintrack.compile(torch.nn.Tanh(), (torch.randn(2, 3),))


def main() -> None:
    answers = _protocol_stream()
    os.environ.setdefault("TWINTRACK_STRICT_KERNELS", "1")
    _warm_up()
    from .runner import run_case
    answers.write(json.dumps({"ready": True}) + "\n")
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        if "fuzz" in request:  # a fuzzer's graph, as Python source
            from twintrack.harness.fuzz.check import check_source
            try:
                result = {"id": request["case"], **check_source(request["fuzz"], request.get("target", "cpu"),
                                                                Path(request["artifacts"]) if request.get("artifacts") else None)}
            except Exception as e:  # the fuzzer's own bug: report it, keep the worker
                result = {"id": request["case"], "status": "fail", "kind": "internal",
                          "reason": f"internal: {type(e).__name__}: {e}"}
        else:
            result = run_case(request["case"], request.get("samples", 2), request.get("target", "cpu"),
                              request.get("artifacts"))
        answers.write(json.dumps(result, default=str) + "\n")


if __name__ == "__main__":
    main()
