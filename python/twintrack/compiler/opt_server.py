"""A pass pipeline run out of process, one process for many modules: a
`twintrack-opt --serve PIPELINE` kept for the life of the compiling process
(its protocol: tools/twintrack-opt/twintrack-opt.cpp).

The compiler runs passes that may abort the process (the affine
super-vectorizer) in a child. A child a call cost about 45 ms to start, for
a pipeline that takes a few: a fifth of a one-op compile. A server that a
pass takes down is started again for the next module."""

from __future__ import annotations

import atexit
import os
import subprocess
import threading
from dataclasses import dataclass

from ..tooling import find_tool

SERVER_TOOL = "twintrack-opt"


@dataclass(frozen=True)
class PipelineResult:
    text: str | None  # the module after the pipeline, printed with its locations
    failure: str | None  # why there is none: "signal 6", or the first diagnostic


class OptServer:
    """Runs `pipeline` on each module given to `run` (or `start`), in a child that stays."""

    def __init__(self, binary: str, pipeline: str):
        self.binary, self.pipeline = binary, pipeline
        self._child: subprocess.Popen | None = None
        self._owner = os.getpid()  # a forked process starts its own: the pipes are its parent's
        self._lock = threading.Lock()

    def run(self, module: str | bytes) -> PipelineResult:
        """The pipeline's result on one module (its text, or its bytecode)."""
        return self.start(module).result()

    def start(self, module: str | bytes) -> PendingResult:
        """Sends one module and returns at once, while the server runs the
        pipeline; the server is the caller's until it takes the result."""
        self._lock.acquire()
        data = module.encode() if isinstance(module, str) else module
        try:
            child = self._started()
            child.stdin.write(b"%d\n" % len(data) + data)
            child.stdin.flush()
        except (BrokenPipeError, ValueError):
            return PendingResult(self, None)
        except BaseException:
            self._lock.release()
            raise
        return PendingResult(self, child)

    def _reply(self, child: subprocess.Popen | None) -> PipelineResult:
        try:
            status, _, size = child.stdout.readline().decode().partition(" ") if child else ("", "", "")
            reply = child.stdout.read(int(size)) if size else b""
            if len(reply) != int(size or 0):  # the child died mid-reply
                status = ""
            reply = reply.decode()
        except ValueError:
            status = ""
        if status in ("ok", "error"):
            return PipelineResult(reply, None) if status == "ok" else \
                PipelineResult(None, (reply.strip().splitlines() or ["error"])[0])
        return PipelineResult(None, self._ended())

    def close(self) -> None:
        if self._child is not None and self._owner == os.getpid() and self._child.poll() is None:
            self._child.stdin.close()
            self._child.wait()
        self._child = None

    def _started(self) -> subprocess.Popen:
        if self._owner != os.getpid():
            self._child, self._owner = None, os.getpid()
        if self._child is None or self._child.poll() is not None:
            self._child = subprocess.Popen([self.binary, "--serve", self.pipeline], stdin=subprocess.PIPE,
                                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        return self._child

    def _ended(self) -> str:
        """How the child that did not answer ended (it is gone: the next call starts another)."""
        child, self._child = self._child, None
        code = child.wait()
        return f"signal {-code}" if code < 0 else f"exit {code}"


class PendingResult:
    """A module sent to a server: `result()` waits for the pipeline's result (once)."""

    def __init__(self, server: OptServer, child: subprocess.Popen | None):
        self._server, self._child = server, child

    def result(self) -> PipelineResult:
        try:
            return self._server._reply(self._child)
        finally:
            self._server._lock.release()


_SERVERS: dict[str, OptServer] = {}
_SERVERS_LOCK = threading.Lock()


def pipeline_server(pipeline: str) -> OptServer | None:
    """The process's server of `pipeline` (None: no twintrack-opt found)."""
    binary = find_tool(SERVER_TOOL)
    if binary is None:
        return None
    with _SERVERS_LOCK:
        if pipeline not in _SERVERS:
            _SERVERS[pipeline] = OptServer(binary, pipeline)
        return _SERVERS[pipeline]


@atexit.register
def _close_servers() -> None:
    for server in _SERVERS.values():
        server.close()
