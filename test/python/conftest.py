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
