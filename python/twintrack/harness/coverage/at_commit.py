"""Long sweeps run at one commit, from a `git worktree` of it, so that edits
made to the checkout while they run cannot leak into their results.

`run_at_commit` makes (or reuses) the worktree out/worktrees/<sha>, gives it
a small venv of its own and re-runs the tool from there:
- the worktree's venv reads the checkout's venv packages through a .pth
  file, after the worktree's python/, and skips their .pth files, so the
  editable install (which maps `twintrack` to the checkout) stays out;
- the C++ extension is not built per commit: the checkout's venv build is
  linked in, after a check that it was built from the same C++ sources
  (`check_extension`), or the run is refused.

`stamp` names the source a run's rows come from; the reports keep it and
refuse to merge rows of another one. `run_source` is the tools' way in.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import json
import os
import site
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote, urlparse

# What the extension is built from: the Makefile's CPP_SOURCES.
CPP_SOURCES = ("CMakeLists.txt", "dialects", "tools/twintrack-opt")
EXTENSION = "_twintrack_cpp"
MARK = "TWINTRACK_AT_COMMIT"  # set for the worktree's run: its sha


class Refused(Exception):
    """A run that would mix sources, or could not be set up at its commit."""


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    if done.returncode:
        raise Refused(f"git {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout.strip()


def resolve(repo: Path, revision: str) -> str:
    """The full sha of a revision."""
    return git(repo, "rev-parse", "--verify", f"{revision}^{{commit}}")


def local_changes(repo: Path) -> list[str]:
    """`git status` lines of `repo`, the linked extension aside."""
    lines = git(repo, "status", "--porcelain").splitlines()
    return [line for line in lines if f"python/twintrack/{EXTENSION}" not in line]


def stamp(repo: Path) -> dict:
    """The source of a run's rows: its commit and whether the tree had changes."""
    return {"commit": git(repo, "rev-parse", "HEAD"), "dirty": bool(local_changes(repo))}


def installed_extension(checkout: Path) -> Path:
    """The venv's built extension, after checking that the venv's twintrack
    is installed from `checkout` and that the file is the one it installed."""
    dist = importlib.metadata.distribution("twintrack")
    url = json.loads(dist.read_text("direct_url.json") or "{}").get("url", "")
    source = Path(unquote(urlparse(url).path)) if url.startswith("file:") else None
    if source is None or source.resolve() != checkout.resolve():
        raise Refused(f"this venv's twintrack is installed from {url or 'a wheel'}, not from {checkout}: "
                      "its extension was not built from this checkout")
    for file in dist.files or ():
        if file.name.startswith(EXTENSION + ".") and file.hash:
            path = Path(file.locate())
            if _record_hash(path) != file.hash.value:
                raise Refused(f"{path} is not the file the install wrote: run `make` again")
            return path
    raise Refused("the C++ extension is not built: run `make`")


def _record_hash(path: Path) -> str:
    """A file's sha256 as a wheel RECORD writes it."""
    return base64.urlsafe_b64encode(hashlib.sha256(path.read_bytes()).digest()).rstrip(b"=").decode()


def check_extension(checkout: Path, sha: str) -> Path:
    """The extension to use at `sha`: the venv's build, provided the C++
    sources of `checkout` (which it is built from) are those of `sha` and
    are no newer than the build. Refused otherwise."""
    extension = installed_extension(checkout)
    changed = git(checkout, "diff", "--name-only", sha, "--", *CPP_SOURCES).splitlines()
    changed += git(checkout, "ls-files", "--others", "--exclude-standard", "--", *CPP_SOURCES).splitlines()
    if changed:
        raise Refused(f"the C++ sources differ between this checkout (which the extension is built from) and "
                      f"{sha[:12]}: {', '.join(changed[:5])}; pick a commit with the same C++ sources")
    sources = [checkout / f for f in git(checkout, "ls-files", "--", *CPP_SOURCES).splitlines()]
    newest = max(sources, key=lambda p: p.stat().st_mtime)
    if newest.stat().st_mtime > extension.stat().st_mtime:
        raise Refused(f"the extension is older than {newest.relative_to(checkout)}: run `make` to rebuild it")
    return extension


def worktree(checkout: Path, sha: str) -> Path:
    """out/worktrees/<sha> of `checkout`, made if missing; refused if it has changes."""
    path = checkout / "out" / "worktrees" / sha[:12]
    if not path.is_dir():
        git(checkout, "worktree", "add", "--detach", str(path), sha)
    if git(path, "rev-parse", "HEAD") != sha or local_changes(path):
        raise Refused(f"{path} is not a clean worktree of {sha[:12]}: `git worktree remove --force {path}`")
    return path


def prepare(checkout: Path, sha: str) -> Path:
    """The worktree at `sha` with its venv and the checked extension; its Python."""
    extension = check_extension(checkout, sha)
    path = worktree(checkout, sha)
    link = path / "python" / "twintrack" / extension.name
    if link.is_symlink() and link.resolve() != extension.resolve():
        link.unlink()
    if not link.exists():
        link.symlink_to(extension)
    return _venv(path)


def _venv(path: Path) -> Path:
    """A venv in the worktree (ignored by git) that sees the worktree's
    python/ first, then this venv's packages, without their .pth hooks."""
    python = path / ".venv" / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path / ".venv")], check=True)
    packages = subprocess.run([str(python), "-c", "import site; print(site.getsitepackages()[0])"],
                              check=True, capture_output=True, text=True).stdout.strip()
    paths = [str(path / "python"), *site.getsitepackages()]
    (Path(packages) / "twintrack-worktree.pth").write_text("\n".join(paths) + "\n")
    return python


def run_at_commit(repo: Path, sha: str, tool: str, argv: list[str]) -> dict:
    """This process's stamp when it runs at `sha` in the worktree made for
    it; otherwise this process becomes the tool (a path relative to the
    repository) run from that worktree with `argv`."""
    if os.environ.get(MARK) == sha:  # the worktree's run
        here = stamp(repo)
        if here["commit"] != sha or here["dirty"]:
            raise Refused(f"{repo} is not a clean worktree of {sha[:12]}: {local_changes(repo)[:3]}")
        _check_imports(repo)
        return {**here, "at_commit": True}
    python = prepare(repo, sha)
    path = python.parents[2]
    print(f"running at {sha[:12]} from {path}", flush=True)
    os.execve(python, [str(python), str(path / tool), *argv], {**os.environ, MARK: sha})


def run_source(repo: Path, revision: str | None, tool: str, argv: list[str], out_dir: Path | None,
               committed_dir: Path) -> tuple[dict, Path]:
    """(stamp, out_dir) of a tool's run. With a revision: at that commit, from
    its worktree (this process becomes that run), into `committed_dir` by
    default. Without: in this checkout as it is, into out/<name>; the
    committed tables are refused."""
    if revision is None:
        out_dir = out_dir or repo / "out" / committed_dir.name
        if out_dir.resolve() == committed_dir.resolve():
            raise Refused(f"{committed_dir.relative_to(repo)} holds committed results: they come from a run "
                          "at one commit (--commit); pass another --out-dir for local work")
        return {**stamp(repo), "at_commit": False}, out_dir
    out_dir = (out_dir or committed_dir).resolve()
    sha = resolve(repo, revision)
    return run_at_commit(repo, sha, tool, [*argv, "--commit", sha, "--out-dir", str(out_dir)]), out_dir


def _check_imports(repo: Path) -> None:
    """twintrack and its extension come from this worktree."""
    import twintrack
    package = Path(twintrack.__file__).resolve().parent
    if package != (repo / "python" / "twintrack").resolve():
        raise Refused(f"twintrack is imported from {package}, not from the worktree {repo}")
    if not any(package.glob(EXTENSION + ".*")):
        raise Refused(f"no C++ extension linked into {package}")
