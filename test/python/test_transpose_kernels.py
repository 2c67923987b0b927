"""Which linalg.transposes the tiled transpose kernel takes: a permutation
that moves one group of dims past another, (batch?, rows, cols) -> (batch?,
cols, rows). The kernel itself runs on the GPU (tools/gpu_check.py; the IR
it builds is checked by test/lowering/gpu/transpose-kernels.mlir)."""

import pytest

from twintrack.compiler.passes.gpu_transpose_kernels import swapped_groups


@pytest.mark.parametrize("permutation, groups", [
    ([1, 0], ([[0], [1]], [[0], [1]])),
    ([0, 2, 1], ([[0], [1], [2]], [[0], [1], [2]])),
    ([0, 2, 3, 1], ([[0], [1], [2, 3]], [[0], [1, 2], [3]])),     # NCHW -> NHWC
    ([0, 3, 1, 2], ([[0], [1, 2], [3]], [[0], [1], [2, 3]])),     # NHWC -> NCHW
    ([2, 0, 1], ([[0, 1], [2]], [[0], [1, 2]])),                  # (4·8, 16) -> (16, 4·8)
    ([0, 1, 3, 2], ([[0, 1], [2], [3]], [[0, 1], [2], [3]])),     # two batch dims as one
])
def test_a_group_moved_past_another_is_a_batched_transpose(permutation, groups):
    assert swapped_groups(permutation) == groups


@pytest.mark.parametrize("permutation", [[0, 1, 2], [1, 0, 2], [2, 1, 0], [1, 2, 0, 3]])
def test_other_permutations_stay_generic(permutation):
    assert swapped_groups(permutation) is None
