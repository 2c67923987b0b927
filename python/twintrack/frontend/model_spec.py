"""MODEL arguments as the tools take them (zoo:NAME, file.py:factory, a
torch.export file): their file, made absolute for a manifest, checked before
loading, and loaded with whatever the user's code raises reported in one line."""

from __future__ import annotations

from pathlib import Path

from ..errors import ModelLoadError, user_code


def model_file(spec: str) -> Path | None:
    """The file MODEL names (None for a zoo model)."""
    if spec.startswith("zoo:"):
        return None
    return Path(spec.rpartition(".py:")[0] + ".py") if ".py:" in spec else Path(spec)


def absolute_model_spec(spec: str) -> str:
    """MODEL with its file made absolute (a zoo model as it is), so that an
    artifact's manifest names the same model from any working directory."""
    path = model_file(spec)
    if path is None:
        return spec
    rest = spec.rpartition(".py:")[2] if ".py:" in spec else None
    absolute = str(path.expanduser().absolute())
    return absolute if rest is None else f"{absolute}:{rest}"


def portable_model_spec(spec: str, root: Path | None = None) -> str:
    """MODEL as a result file records it: its file relative to `root` (the
    working directory) where the longest tail of its path names a file there
    (an artifact compiled on another machine names its own absolute path),
    else as it is."""
    path = model_file(spec)
    if path is None or not path.is_absolute():
        return spec
    root = root or Path.cwd()
    tails = (Path(*path.parts[start:]) for start in range(1, len(path.parts)))
    found = next((tail for tail in tails if (root / tail).is_file()), None)
    if found is None:
        return spec
    return str(found) + (f":{spec.rpartition('.py:')[2]}" if ".py:" in spec else "")


def check_model_file(spec: str) -> None:
    """A MODEL file that is a directory, or that cannot be read, named as such."""
    path = model_file(spec)
    if path is None or not path.exists():
        return  # a zoo model; a missing file is the frontend's to name
    if path.is_dir():
        raise ModelLoadError(f"{path} is a directory, not a model file "
                             f"(expected a torch.export.save file, zoo:NAME or file.py:factory)")
    try:
        with open(path, "rb"):
            pass
    except OSError as e:
        raise ModelLoadError(f"{path}: cannot read the model file: {e.strerror}") from None


def load_user_model(spec: str, dtype: str | None = None):
    """frontend.load_model, with a directory, an unreadable file, or an
    exception out of the user's factory (or a size that cannot be allocated)
    reported as a ModelLoadError naming MODEL."""
    from .export import load_model
    check_model_file(spec)
    what = "the factory failed" if ".py:" in spec else "loading the model failed"
    with user_code(f"{spec}: {what}"):
        return load_model(spec, dtype)
