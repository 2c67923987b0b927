"""A pool of coverage workers (subprocesses), so that a case that segfaults,
aborts or hangs becomes a result ('crash (SIGSEGV)', 'timeout after 300 s')
and the run goes on with a fresh worker.

One thread, one selector: each worker is starting (waiting for its ready
line), idle, or busy with one case and a deadline. Workers are also
replaced after `recycle_after` cases, so that whatever a long run leaks
(MLIR contexts, JIT code) stays bounded.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

STARTUP_LIMIT_S = 300.0


@dataclass
class Worker:
    process: subprocess.Popen
    ready: bool = False
    case: str | None = None
    deadline: float = 0.0
    started: float = field(default_factory=time.monotonic)
    dispatched: float = 0.0
    done: int = 0
    buffer: bytes = b""

    def stop(self) -> None:
        """Kill this worker's own process (by its pid) and reap it."""
        if self.process.poll() is None:
            try:
                os.kill(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.process.wait()


WORKER = (sys.executable, "-m", "twintrack.harness.coverage.worker")


def death_reason(returncode: int) -> str:
    """'crash (SIGSEGV)' for a signal, 'exit N' for a plain exit."""
    if returncode < 0:
        try:
            return f"crash ({signal.Signals(-returncode).name})"
        except ValueError:
            return f"crash (signal {-returncode})"
    return f"crash (exit {returncode})"


class Pool:
    """Runs case requests on `jobs` workers; `run` yields results as they come."""

    def __init__(self, jobs: int = 1, timeout_s: float = 300.0, recycle_after: int = 100, stderr=None,
                 command: tuple[str, ...] = WORKER):
        self.jobs, self.timeout_s, self.recycle_after = max(1, jobs), timeout_s, recycle_after
        self.stderr = stderr if stderr is not None else subprocess.DEVNULL
        self.command = command  # a worker speaking worker.py's protocol
        self.selector = selectors.DefaultSelector()
        self.workers: list[Worker] = []

    def _start(self) -> Worker:
        process = subprocess.Popen(self.command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr)
        worker = Worker(process)
        self.selector.register(worker.process.stdout, selectors.EVENT_READ, worker)
        self.workers.append(worker)
        return worker

    def _retire(self, worker: Worker) -> None:
        self.selector.unregister(worker.process.stdout)
        self.workers.remove(worker)
        worker.stop()

    def close(self) -> None:
        for worker in list(self.workers):
            self._retire(worker)

    def run(self, requests: Iterable[dict], on_result: Callable[[dict], None], keep: bool = False) -> None:
        """Each request to a worker; `on_result(result)` for each, in
        completion order. The workers stop at the end unless `keep`."""
        pending = list(requests)
        pending.reverse()
        try:
            while pending or any(w.case for w in self.workers):
                while len(self.workers) < min(self.jobs, len(pending) + self._busy()):
                    self._start()
                for worker in [w for w in self.workers if w.ready and not w.case and pending]:
                    self._dispatch(worker, pending.pop())
                self._wait(on_result, pending)
        finally:
            if not keep:
                self.close()

    def call(self, request: dict) -> dict:
        """One request, synchronously, on a kept worker (the fuzzer's way in)."""
        results = []
        self.run([request], results.append, keep=True)
        return results[0]

    def _busy(self) -> int:
        return sum(1 for w in self.workers if w.case)

    def _dispatch(self, worker: Worker, request: dict) -> None:
        worker.dispatched = time.monotonic()
        worker.case, worker.deadline = request["case"], worker.dispatched + self.timeout_s
        worker.process.stdin.write((json.dumps(request) + "\n").encode())
        worker.process.stdin.flush()

    def _wait(self, on_result, pending: list) -> None:
        """Wait for an answer, a death or a deadline, and handle what happened."""
        now = time.monotonic()
        deadlines = [w.deadline if w.case else w.started + STARTUP_LIMIT_S for w in self.workers]
        timeout = max(0.0, min(deadlines) - now) if deadlines else None
        for key, _ in self.selector.select(timeout):
            self._readable(key.data, on_result, pending)
        now = time.monotonic()
        for worker in list(self.workers):
            if worker.case and now > worker.deadline:
                on_result(self._lost(worker, f"timeout after {self.timeout_s:.0f} s"))
                self._retire(worker)
            elif not worker.ready and now > worker.started + STARTUP_LIMIT_S:
                self._retire(worker)
                raise RuntimeError("a coverage worker did not start (run `python -m twintrack.harness.coverage.worker` to see why)")

    def _readable(self, worker: Worker, on_result, pending: list) -> None:
        chunk = os.read(worker.process.stdout.fileno(), 1 << 20)
        if not chunk:  # the worker died
            returncode = worker.process.wait()
            if worker.case:
                on_result(self._lost(worker, death_reason(returncode)))
            elif not worker.ready:
                self._retire(worker)
                raise RuntimeError(f"a coverage worker died while starting ({death_reason(returncode)})")
            self._retire(worker)
            return
        worker.buffer += chunk
        while b"\n" in worker.buffer:
            line, worker.buffer = worker.buffer.split(b"\n", 1)
            self._answer(worker, json.loads(line), on_result)

    def _answer(self, worker: Worker, message: dict, on_result) -> None:
        if message.get("ready"):
            worker.ready = True
            return
        worker.case, worker.done = None, worker.done + 1
        on_result(message)
        if worker.done >= self.recycle_after:
            self._retire(worker)

    @staticmethod
    def _lost(worker: Worker, reason: str) -> dict:
        """The result of a case whose worker died or ran out of time."""
        result = {"id": worker.case, "status": "fail", "reason": reason, "samples": [],
                  "compile_s": None, "wall_s": round(time.monotonic() - worker.dispatched, 3)}
        worker.case = None
        return result
