import os
import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python"))
# A fast-path kernel that fails to build is a test failure, not a quiet fallback.
os.environ.setdefault("TWINTRACK_STRICT_KERNELS", "1")


@pytest.fixture
def run_tool():
    """Run tools/<name>.py as a user would; returns the CompletedProcess."""
    import subprocess

    def run(name: str, *args: str):
        return subprocess.run([sys.executable, str(REPO / "tools" / f"{name}.py"), *map(str, args)],
                              capture_output=True, text=True, cwd=REPO)
    return run


def copies_read_through(kernel_path: str) -> int:
    """How many permuted copies of Q, K or V a flash-attention kernel took
    over (its path says "(N copies read through)"; each was a kernel)."""
    found = re.search(r"\((\d) copies read through\)", kernel_path)
    return int(found.group(1)) if found else 0


# The op-family grids (every dtype × shape of an op), the CLI error cases
# and the GPU-loop modules run whole in `make test-all`; `make test` takes
# the first case of each test, so it stays within CI's time. For the sorts the
# first (float32) case holds every edge shape and takes a minute and more:
# their float64 cases (two shapes) and the GPU compiles stand in.
GRID_FILES = {"test_sorts.py": re.compile(r"test_(sort|topk|kthvalue)\[torch.float64|test_gpu_compiles\[(sort|topk)\]"),
              "test_scans.py": 1, "test_scatters.py": 1, "test_eager_semantics.py": 1, "test_opinfo_fixes.py": 1,
              "test_gpu_every_loop.py": 1, "test_user_errors.py": 1}


def pytest_collection_modifyitems(config, items):
    seen: dict[tuple[str, str], int] = {}
    for item in items:
        rule = GRID_FILES.get(item.path.name)
        if rule is None:
            continue
        key = (item.path.name, item.originalname)
        seen[key] = seen.get(key, 0) + 1
        keep = rule.search(item.nodeid) if isinstance(rule, re.Pattern) else seen[key] <= rule
        if not keep:
            item.add_marker(pytest.mark.slow)
