"""Which score epilogues are masks the flash kernel can use: boolean
masks it may class in tiles (twintrack.compiler.kernels.mask_tiles: a
select of -inf on a bool tensor, kept where true or hidden where true, read
per row or the same for every row; anything else keeps the mask read score
by score), and causal conditions, alone or among others, that bound each
block's keys (causal_mask)."""

import pytest
from mlir import ir

from twintrack.bindings import new_context
from twintrack.compiler.kernels.epilogue import Epilogue, EpilogueInput
from twintrack.compiler.kernels.mask_tiles import MaskTiles, TensorMask, tensor_mask_of
from twintrack.compiler.passes.generic_body import describe_body, indexing_maps, map_dims

def _epilogue(mask_type: str, mask_map: str, body: str, seq: int = 512) -> Epilogue:
    """The score epilogue of a generic over (batch, row, key) reading the
    mask `mask_type` through `mask_map` and the scores; `body` computes %r
    from %m (the mask element) and %s (the score)."""
    scores = f"memref<8x{seq}x{seq}xf32>"
    text = f"""
    func.func @f(%mask: {mask_type}, %scores: {scores}, %out: {scores}) {{
      %false = arith.constant false
      %true = arith.constant true
      %inf = arith.constant 0xFF800000 : f32
      %half = arith.constant 0.125 : f32
      linalg.generic {{indexing_maps = [affine_map<(b, q, k) -> {mask_map}>, affine_map<(b, q, k) -> (b, q, k)>,
                                        affine_map<(b, q, k) -> (b, q, k)>],
                       iterator_types = ["parallel", "parallel", "parallel"]}}
          ins(%mask, %scores : {mask_type}, {scores}) outs(%out : {scores}) {{
      ^bb0(%m: {mask_type.split("x")[-1].rstrip(">")}, %s: f32, %o: f32):
        {body}
        linalg.yield %r : f32
      }}
      return
    }}"""
    module = ir.Module.parse(text)
    func = module.body.operations[0]
    generic = next(op for op in func.regions[0].blocks[0].operations if op.operation.name == "linalg.generic")
    ops, result = describe_body(generic.operation)
    dims = map_dims(indexing_maps(generic.operation)[0])
    inputs = (EpilogueInput(mask_type, dims), EpilogueInput(None, (0, 1, 2)))
    return Epilogue(inputs, ops, result), module


@pytest.fixture
def context():
    with new_context("mlir"), ir.Location.unknown():
        yield


KEEP = "%c = arith.cmpi eq, %m, %false : i1\n %r = arith.select %c, %inf, %s : f32"
HIDE = "%t = arith.mulf %s, %half : f32\n %r = arith.select %m, %inf, %t : f32"
NOT_KEEP = "%c = arith.xori %m, %true : i1\n %r = arith.select %c, %inf, %s : f32"


@pytest.mark.parametrize("body, visible_if", [(KEEP, True), (HIDE, False), (NOT_KEEP, True)])
def test_a_select_of_minus_infinity_on_a_bool_tensor_is_a_mask(context, body, visible_if):
    epilogue, _ = _epilogue("memref<512x512xi1>", "(q, k)", body)
    mask = tensor_mask_of(epilogue, None)
    assert mask == TensorMask(0, visible_if, (512, 512), (), per_row=True)
    tiles = MaskTiles(mask, 128, 64)
    assert (tiles.query_tiles, tiles.key_tiles, tiles.vector_width()) == (4, 8, 16)
    assert tiles.summary_type().shape == [4, 9]  # each key tile's class, then the tiles to run


def test_a_key_padding_mask_is_the_same_for_every_row(context):
    epilogue, _ = _epilogue("memref<8x512xi1>", "(b, k)", KEEP)
    mask = tensor_mask_of(epilogue, None)
    assert mask == TensorMask(0, True, (8, 512), (0,), per_row=False)
    tiles = MaskTiles(mask, 1, 64)
    assert tiles.summary_type().shape == [8, 1, 9]


def test_a_ragged_mask_reads_narrower_vectors(context):
    epilogue, _ = _epilogue("memref<200x200xi1>", "(q, k)", KEEP, 200)
    assert MaskTiles(tensor_mask_of(epilogue, None), 64, 64).vector_width() == 8
    epilogue, _ = _epilogue("memref<197x197xi1>", "(q, k)", KEEP, 197)
    assert MaskTiles(tensor_mask_of(epilogue, None), 64, 64).vector_width() == 1


@pytest.mark.parametrize("mask_type, mask_map, body", [
    # an additive float mask: no -inf select
    ("memref<512x512xf32>", "(q, k)", "%r = arith.addf %s, %m : f32"),
    # the condition reads the score too
    ("memref<512x512xi1>", "(q, k)",
     "%p = arith.cmpf ogt, %s, %half : f32\n %c = arith.andi %p, %m : i1\n %r = arith.select %c, %inf, %s : f32"),
    # the mask read transposed: its last dim is not the key
    ("memref<512x512xi1>", "(k, q)", KEEP),
])
def test_anything_else_is_no_tile_mask(context, mask_type, mask_map, body):
    epilogue, _ = _epilogue(mask_type, mask_map, body)
    assert tensor_mask_of(epilogue, None) is None


CAUSAL_AND_PADDING = """%q = linalg.index 1 : index
        %k = linalg.index 2 : index
        %c = arith.cmpi sle, %k, %q : index
        %v = arith.andi %c, %m : i1
        %h = arith.cmpi eq, %v, %false : i1
        %r = arith.select %h, %inf, %s : f32"""
CAUSAL = """%q = linalg.index 1 : index
        %k = linalg.index 2 : index
        %h = arith.cmpi sgt, %k, %q : index
        %r = arith.select %h, %inf, %s : f32"""
ROWS_AND_PADDING = CAUSAL_AND_PADDING.replace("arith.cmpi sle, %k, %q", "arith.cmpi sge, %q, %q")


@pytest.mark.parametrize("body, reach, alone", [
    (CAUSAL, 0, True),                # the mask alone: the kernel may apply it itself
    (CAUSAL_AND_PADDING, 0, False),   # a causal mask and a padding mask's gather (Hugging Face's LLaMA)
    (ROWS_AND_PADDING, None, False),  # row >= row (BERT's row >= 0): no key bound
])
def test_a_causal_condition_among_others_still_bounds_the_keys(context, body, reach, alone):
    """A kept score must meet every condition of an `and`: where one of
    them is causal, the keys past the diagonal are hidden whatever the
    others say, so the flash kernel may skip their tiles; it applies the
    epilogue (the padding) itself only where the causal mask is all of it."""
    from twintrack.compiler.kernels.causal_mask import masked_key_reach, masks_only_past_reach

    epilogue, _ = _epilogue("memref<8x512xi1>", "(b, k)", body)
    assert masked_key_reach(epilogue, None, 512, 512) == reach
    assert masks_only_past_reach(epilogue, reach) is alone
