"""The CPU executables' allocator (compiler/buffer_pool.c): memref.alloc of
1 MiB or more is handed a block kept from an earlier call of its size
class, so a dynamic-shape temporary past the workspace is not faulted in
again each call; smaller blocks go back to the C library; at most the
limit is kept."""

import ctypes
import shutil

import pytest

from twintrack.compiler.cpu_jit import _buffer_pool, allocation_functions

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler (cc)")


@pytest.fixture
def pool():
    library = _buffer_pool()
    alloc = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t)(
        allocation_functions()["_mlir_memref_to_llvm_aligned_alloc"].value)
    free = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(allocation_functions()["_mlir_memref_to_llvm_free"].value)
    library.twintrack_pool_kept.restype = ctypes.c_size_t
    return library, alloc, free


def test_a_large_block_is_kept_and_handed_out_again(pool):
    library, alloc, free = pool
    kept = library.twintrack_pool_kept()
    size = (7 << 20) + 12345  # a size class no other test in this process leaves a kept block of
    first = alloc(64, size)
    assert first % 64 == 0
    ctypes.memset(first, 7, size)  # the whole block is usable
    free(first)
    assert library.twintrack_pool_kept() > kept
    assert alloc(64, size + 100) == first  # the same size class (64 KiB steps): the kept block
    assert library.twintrack_pool_kept() == kept
    free(first)


def test_small_blocks_and_blocks_past_the_limit_go_back(pool):
    library, alloc, free = pool
    kept = library.twintrack_pool_kept()
    small = alloc(64, 1000)
    free(small)
    assert library.twintrack_pool_kept() == kept
    library.twintrack_pool_limit(ctypes.c_size_t(0))
    try:
        # a size class no other test in this process leaves a kept block of
        # (the pool is the process's: one kept block would be handed out here)
        large = alloc(64, (23 << 20) + 4097)
        free(large)
        assert library.twintrack_pool_kept() == kept
    finally:
        library.twintrack_pool_limit(ctypes.c_size_t(2 << 30))
