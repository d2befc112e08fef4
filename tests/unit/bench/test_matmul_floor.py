"""The matrix-product floor computes the FLOPs it claims, at the model's shapes, in its dtype."""

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from embedtext.bench.matmul_floor import STEP_TOKENS, EncoderShape, MatmulFloor


def test_the_shape_is_read_from_the_model():
    from embedtext.server.models.source import load_model_spec

    assert EncoderShape.of(load_model_spec("default").path) == EncoderShape(layers=6, hidden=384, intermediate=1536)


@pytest.mark.parametrize(("rows", "tokens"), [(7, 50), (3, 700), (1, STEP_TOKENS + 1)])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_run_computes_the_linear_flops_of_every_row(rows, tokens, dtype):
    shape = EncoderShape(layers=2, hidden=32, intermediate=64)
    floor = MatmulFloor(shape, dtype=dtype, threads=1)
    assert {w.dtype for layer in floor.layers for w in layer} == {getattr(torch, dtype)}
    with FlopCounterMode(display=False) as counter:
        floor.run(rows, tokens)
    assert counter.get_total_flops() == rows * shape.linear_flops(tokens)
