"""The persistent compile cache: a compile done once is not done again, in
this process or the next.

Where it lives: $TWINTRACK_CACHE_DIR, else $XDG_CACHE_HOME/twintrack, else
~/.cache/twintrack. TWINTRACK_CACHE=0 turns it off; `tools/cache.py`
shows and clears it (removing the directory is as good). What it holds:

  artifacts/KEY/      complete artifacts (as tools/compile.py writes them),
                      keyed by the exported graph: its code with shapes,
                      dtypes and strides, its source lines, its constants,
                      the calling convention, the options (target and arch
                      among them) and the compiler's own fingerprint;
  requests/KEY.json   a tools/compile.py command (its options and model
                      file) -> the artifact it made, with every source file
                      loading the model read and its hash: a repeat whose
                      files are unchanged copies the artifact without
                      importing torch;
  ptxas/KEY.bin      cubins with ptxas's report, by PTX text, arch and ptxas;
  graphs/KEY/        the torch.compile backend's graphs (twintrack.dynamo_backend),
                     each an artifact with its constants, keyed by the
                     captured FX graph (devices left out), its input specs,
                     its constants, the options and `portable_fingerprint`:
                     a machine without MLIR computes the same key, and
                     loads the artifact instead of compiling; graph.py is
                     the captured code the key was computed from;
  misses/KEY/        a graph a machine without MLIR looked up and did not
                     find: graph.py, its captured code (diff it against
                     the graph.py of the entry it should have hit), and
                     graph.pt, the graph itself with its input specs and
                     options, which `tools/cache.py compile-misses`
                     compiles where MLIR is, into graphs/KEY;
  native/KEY/        a CPU executable's machine code as a shared library
                     (lib.so, with info.json), keyed by its LLVM-dialect
                     text, the optimization level, the MLIR build and this
                     host's CPU: loading it skips the JIT.

Every entry is written to a temporary name and renamed, so readers never
see half an entry, and concurrent compiles are safe. Past its size limit
(TWINTRACK_CACHE_MB, default 4096) the least recently used entries go.

This module imports nothing from torch: the request lookup runs before it.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parents[1]  # the whole twintrack package
DEFAULT_LIMIT_MB = 4096
KINDS = ("artifacts", "requests", "ptxas", "graphs", "native", "misses")


def enabled() -> bool:
    return os.environ.get("TWINTRACK_CACHE", "1") not in ("0", "off", "false", "")


def root() -> Path:
    if os.environ.get("TWINTRACK_CACHE_DIR"):
        return Path(os.environ["TWINTRACK_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "twintrack"


def digest(*parts: str | bytes) -> str:
    """A key from its parts (order matters)."""
    hasher = hashlib.blake2b(digest_size=16)
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        hasher.update(len(data).to_bytes(8, "little"))
        hasher.update(data)
    return hasher.hexdigest()


def file_digest(path: Path) -> str | None:
    try:
        return digest(path.read_bytes())
    except OSError:
        return None


@functools.cache
def compiler_fingerprint() -> str:
    """What makes this compiler this one: twintrack's sources and C++
    extension, its default recipes, and the versions of torch, torch-mlir
    and the MLIR bindings."""
    from importlib import metadata

    from .recipes import DEFAULT_LOWERING_DIR
    files = sorted(p for p in PACKAGE_DIR.rglob("*") if p.suffix in (".py", ".so") and "__pycache__" not in p.parts)
    parts = [f"{p.relative_to(PACKAGE_DIR)}={file_digest(p)}" for p in files]
    parts.append(f"extension={_extension_digest()}")
    parts.append(directory_digest(DEFAULT_LOWERING_DIR))
    for package in ("torch", "torch-mlir", "xtc-mlir-python-bindings"):
        try:
            parts.append(f"{package}={metadata.version(package)}")
        except metadata.PackageNotFoundError:
            parts.append(f"{package}=none")
    return digest(*parts)


def _extension_digest() -> str | None:
    """The C++ extension's digest (the fusion pass, the dialect): it is
    installed beside the package, not in the source tree."""
    import importlib.util
    try:
        spec = importlib.util.find_spec("twintrack._twintrack_cpp")
    except ImportError:
        return None
    return file_digest(Path(spec.origin)) if spec is not None and spec.origin else None


@functools.cache
def portable_fingerprint() -> str:
    """The compiler's identity as a machine without MLIR computes it too:
    twintrack's Python sources, its default recipes and its C++ sources
    (not the built extension, nor the torch and MLIR versions, which such a
    machine may lack or have in another build)."""
    tree = PACKAGE_DIR.parents[1]
    files = sorted(p for p in PACKAGE_DIR.rglob("*.py") if "__pycache__" not in p.parts)
    parts = [f"{p.relative_to(PACKAGE_DIR)}={file_digest(p)}" for p in files]
    for directory in ("lowering", "dialects"):
        parts.append(directory_digest(tree / directory) if (tree / directory).is_dir() else f"no {directory}")
    return digest(*parts)


def directory_digest(directory: Path) -> str:
    """Every file under `directory`, by relative path and content."""
    directory = Path(directory)
    files = sorted(p for p in directory.rglob("*") if p.is_file())
    return digest(*(f"{p.relative_to(directory)}={file_digest(p)}" for p in files))


# ---------------------------------------------------------------- artifacts

def artifact_path(key: str) -> Path | None:
    """The cached artifact of `key`, if there is one (marked as used)."""
    return _entry("artifacts", key, "manifest.json")


def _entry(kind: str, key: str, *files: str) -> Path | None:
    """The directory entry `key` of `kind`, if it holds `files` (marked as used)."""
    if not enabled():
        return None
    path = root() / kind / key
    if not all((path / name).is_file() for name in files):
        return None
    _touch(path)
    return path


def best_effort(store):
    """A store that fails (a full disk, a read-only home) is skipped: the
    cache never fails a compile."""
    @functools.wraps(store)
    def storing(*args, **kwargs) -> None:
        if not enabled():
            return
        try:
            store(*args, **kwargs)
        except OSError:
            pass
    return storing


@best_effort
def store_entry(kind: str, key: str, fill) -> None:
    """A directory entry `key` of `kind`, written by `fill(directory)`."""
    _store_tree(root() / kind / key, fill)
    evict_past_limit()


def store_artifact(key: str, artifact: Path) -> None:
    """Keep a copy of the finished artifact directory `artifact` under `key`."""
    store_entry("artifacts", key, lambda staging: shutil.copytree(artifact, staging, dirs_exist_ok=True))


def copy_artifact(cached: Path, destination: Path) -> None:
    """A cached artifact into a fresh directory (copied: an artifact's user
    may edit it; the cache must stay as it was)."""
    shutil.copytree(cached, destination, dirs_exist_ok=True)


# ---------------------------------------------------------------- graphs

def graph_path(key: str) -> Path | None:
    """The cached artifact of a torch.compile graph, if there is one (marked as used)."""
    return _entry("graphs", key, "manifest.json")


def miss_path(key: str) -> Path:
    """The captured code of a graph looked up under `key` and not found."""
    return root() / "misses" / key / "graph.py"


def store_miss(key: str, fill) -> None:
    """Keep what `fill(directory)` writes of a graph looked up under `key`
    and not found (the first miss of a key stays)."""
    store_entry("misses", key, fill)


def misses() -> list[Path]:
    """The recorded misses (directories named by their key), oldest first."""
    folder = root() / "misses"
    found = [p for p in folder.iterdir() if p.is_dir() and not p.name.startswith(".")] if folder.is_dir() else []
    return sorted(found, key=_mtime)


def remove_entry(path: Path) -> None:
    _remove(path)


# ---------------------------------------------------------------- native code

def native_path(key: str) -> Path | None:
    """The cached shared library of a CPU executable, if there is one (marked as used)."""
    return _entry("native", key, "lib.so", "info.json")


# ---------------------------------------------------------------- requests

def find_request(key: str) -> Path | None:
    """The artifact a request made, if every file it read is unchanged."""
    if not enabled():
        return None
    entry = root() / "requests" / f"{key}.json"
    try:
        record = json.loads(entry.read_text())
        files, artifact = dict(record["files"]), str(record["artifact"])
    except (OSError, ValueError, KeyError, TypeError):  # absent, or not an entry this module wrote
        return None
    if any(file_digest(Path(path)) != expected for path, expected in files.items()):
        return None
    _touch(entry)
    return artifact_path(artifact)


@best_effort
def store_request(key: str, artifact_key: str, files: list[Path]) -> None:
    record = {"artifact": artifact_key, "files": {str(p): file_digest(p) for p in sorted(set(files))}}
    _write_atomically(root() / "requests" / f"{key}.json", json.dumps(record, indent=1).encode())


# ---------------------------------------------------------------- ptxas

def find_cubin(key: str) -> tuple[bytes, str] | None:
    """(cubin, ptxas report) of a kernel assembled before."""
    if not enabled():
        return None
    path = root() / "ptxas" / f"{key}.bin"
    try:
        report, _, cubin = path.read_bytes().partition(b"\0")  # one file: an entry is whole or absent
    except OSError:
        return None
    _touch(path)
    return cubin, report.decode()


@best_effort
def store_cubin(key: str, cubin: bytes, report: str) -> None:
    _write_atomically(root() / "ptxas" / f"{key}.bin", report.encode() + b"\0" + cubin)
    evict_past_limit()


# ---------------------------------------------------------------- upkeep

def entries() -> list[Path]:
    """Every entry (a file or an artifact directory), oldest use first."""
    found = []
    for kind in KINDS:
        folder = root() / kind
        if folder.is_dir():
            found += [p for p in folder.iterdir() if not p.name.startswith(".")]
    return sorted(found, key=_mtime)


def size_bytes(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def evict_past_limit(limit_mb: int | None = None) -> int:
    """Remove the least recently used entries until the cache fits; returns how many went."""
    limit = (limit_mb if limit_mb is not None else int(os.environ.get("TWINTRACK_CACHE_MB", DEFAULT_LIMIT_MB))) << 20
    found = entries()
    sizes = [size_bytes(p) for p in found]
    total, removed = sum(sizes), 0
    for path, size in zip(found, sizes, strict=True):
        if total <= limit:
            break
        _remove(path)
        total, removed = total - size, removed + 1
    return removed


def clear() -> int:
    """Remove everything; returns how many entries there were."""
    found = entries()
    for path in found:
        _remove(path)
    return len(found)


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _touch(path: Path) -> None:
    try:
        os.utime(path)
    except OSError:
        pass


def _write_atomically(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(data)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _store_tree(path: Path, fill) -> None:
    """A directory entry, filled under a temporary name and renamed into
    place; if another process stored the same key first, theirs stays."""
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    try:
        fill(staging)
        os.rename(staging, path)
    except OSError:
        pass  # already there (or the disk said no): a cache never fails a compile
    finally:
        shutil.rmtree(staging, ignore_errors=True)
