"""tools/pack_artifacts.py: artifacts split into parts under a size limit,
without their stage dumps and reproducers."""

import importlib.util
from pathlib import Path

import pytest

TOOL = Path(__file__).resolve().parents[2] / "tools" / "pack_artifacts.py"
spec = importlib.util.spec_from_file_location("pack_artifacts", TOOL)
pack_artifacts = importlib.util.module_from_spec(spec)
spec.loader.exec_module(pack_artifacts)


def _artifact(root: Path, name: str, kib: int) -> None:
    (root / name / "stages").mkdir(parents=True)
    (root / name / "manifest.json").write_text("{}")
    (root / name / "kernels.bin").write_bytes(b"k" * kib * 1024)
    (root / name / "stages" / "00-torch.mlir").write_bytes(b"s" * 4 * kib * 1024)


def test_parts_stay_under_the_limit_and_leave_the_dumps_out(tmp_path):
    source = tmp_path / "artifacts"
    for index in range(5):
        _artifact(source, f"a{index}", 300)
    (source / "SOURCE.json").write_text('{"commit": "abc"}')
    assert pack_artifacts.main([str(source), str(tmp_path / "parts"), "--max-mib", "0.7"]) == 0
    parts = sorted((tmp_path / "parts").iterdir())
    assert len(parts) == 3  # two artifacts of 300 KiB per 0.7 MiB part
    for part in parts:
        assert (part / "SOURCE.json").is_file()
        assert sum(f.stat().st_size for f in part.rglob("*") if f.is_file()) <= 0.7 * 2**20
        assert not list(part.rglob("stages"))
    assert sorted(p.name for part in parts for p in part.iterdir() if p.is_dir()) == [f"a{i}" for i in range(5)]


def test_an_artifact_over_the_limit_is_refused(tmp_path):
    _artifact(tmp_path / "artifacts", "big", 900)
    with pytest.raises(SystemExit, match="over the limit"):
        pack_artifacts.main([str(tmp_path / "artifacts"), str(tmp_path / "parts"), "--max-mib", "0.5"])
