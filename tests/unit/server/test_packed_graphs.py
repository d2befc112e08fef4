"""A packed step's inputs where vLLM's CUDA graphs hold it (server/engine/vllm_packed.py): in the
graphs' own buffers, padded to the next captured size with position 0, with the forward context's
replay arguments; else the step's own inputs. A GPU replays the graphs (bench/gpu/packed_overlap.py
--graphs); here a stand-in for vLLM's dispatcher, which pads as vLLM's does, checks the bookkeeping."""

from dataclasses import dataclass

import torch

from embedtext.server.engine.vllm_packed import PackedModel, _StepGraphs

EAGER, REPLAY = "NONE", "PIECEWISE"  # vLLM's CUDAGraphMode names


@dataclass(frozen=True)
class _Descriptor:  # stand-in for vLLM's BatchDescriptor
    num_tokens: int


def _model(sizes=(8, 16), dispatcher_says_eager=False) -> PackedModel:
    """A PackedModel with only what ``_graph_inputs`` reads; its graphs' dispatch is a stand-in."""

    def stand_in_dispatch(num_tokens: int):
        padded = next(s for s in sizes if s >= num_tokens)
        return (EAGER, _Descriptor(num_tokens)) if dispatcher_says_eager else (REPLAY, _Descriptor(padded))

    model = PackedModel.__new__(PackedModel)
    model.graphs = _StepGraphs(
        dispatch=stand_in_dispatch,
        input_ids=torch.full((max(sizes),), -1, dtype=torch.int32),
        positions=torch.full((max(sizes),), -1, dtype=torch.int64),
        eager=EAGER,
        largest=max(sizes),
    )
    model.use_graphs = True
    return model


def _step(total: int):
    return torch.arange(100, 100 + total, dtype=torch.int32), torch.arange(total, dtype=torch.int64)


def test_a_step_a_graph_holds_goes_to_the_graphs_buffers_padded_with_position_zero():
    model = _model()
    ids, positions = _step(6)
    got_ids, got_positions, replay = model._graph_inputs(6, ids, positions)
    assert replay == {"num_tokens": 8, "cudagraph_runtime_mode": REPLAY, "batch_descriptor": _Descriptor(8)}
    assert got_ids.data_ptr() == model.graphs.input_ids.data_ptr()  # the addresses the graphs read
    assert got_positions.data_ptr() == model.graphs.positions.data_ptr()
    assert got_ids[:6].tolist() == list(range(100, 106)) and len(got_ids) == 8
    assert got_positions.tolist() == [0, 1, 2, 3, 4, 5, 0, 0]
    got_ids, got_positions, replay = model._graph_inputs(9, *_step(9))  # the next size up
    assert replay["num_tokens"] == 16 and got_positions.tolist() == [*range(9), *[0] * 7]


def test_a_step_no_graph_holds_keeps_its_own_inputs():
    for model, total in (
        (_model(), 17),  # longer than the largest graph
        (_model(dispatcher_says_eager=True), 6),
    ):
        ids, positions = _step(total)
        got_ids, got_positions, replay = model._graph_inputs(total, ids, positions)
        assert got_ids is ids and got_positions is positions and replay == {"num_tokens": total}
    model = _model()
    model.use_graphs = False  # the start-up check found them wrong, or the probe's other way
    ids, positions = _step(6)
    assert model._graph_inputs(6, ids, positions) == (ids, positions, {"num_tokens": 6})
    assert model.graphs.input_ids.tolist() == [-1] * 16  # untouched
