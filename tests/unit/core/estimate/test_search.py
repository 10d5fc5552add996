"""The largest batch that fits, found by the search against real estimates:
the same answer as estimating every batch, within the bound on estimates."""

from __future__ import annotations

import dataclasses

import pytest

from app.core.estimate.run import estimate
from app.core.estimate.search import MAX_PROBES, largest_batch
from app.core.estimate.types import Estimate, StepRequest

T = pytest.importorskip("transformers")

MiB = 1024**2
CONTEXT_BYTES = 300 * MiB


class Counted:
    """The real estimate, counting the batches it was asked for."""

    def __init__(self) -> None:
        self.batches: list[int] = []

    def __call__(self, request: StepRequest) -> Estimate:
        self.batches.append(request.batch)
        return estimate(request)


@pytest.fixture(scope="module")
def llama(tmp_path_factory) -> StepRequest:
    """A small Llama asked at a 16k context: the formula's KV cache grows with the
    batch, each layer's K and V over 10 MiB from batch 1 (below that the caching
    allocator's pools make a larger batch's reserved bytes dip now and then)."""
    folder = tmp_path_factory.mktemp("llama")
    T.LlamaConfig(num_hidden_layers=4, hidden_size=512, intermediate_size=1376,
                  num_attention_heads=8, num_key_value_heads=8, vocab_size=4000,
                  max_position_embeddings=16384).save_pretrained(folder)
    return StepRequest(str(folder), batch=8, context=16384, dtype="bfloat16")


def truth(request: StepRequest, room: int, up_to: int) -> int | None:
    """The largest batch that fits, by estimating every batch from 1 to ``up_to``."""
    best = None
    for batch in range(1, up_to + 1):
        est = estimate(dataclasses.replace(request, batch=batch))
        if est.reserved_bytes + CONTEXT_BYTES <= room:
            best = batch
    return best


def room_for(request: StepRequest, batch: int, extra: int = 0) -> int:
    """Free memory that batch ``batch`` just fits (plus ``extra`` bytes)."""
    est = estimate(dataclasses.replace(request, batch=batch))
    return est.reserved_bytes + CONTEXT_BYTES + extra


@pytest.mark.parametrize(("start", "target"), [(8, 37), (128, 37), (1, 5), (50, 51)])
def test_the_search_finds_the_batch_every_estimate_agrees_on(llama, start, target):
    request = dataclasses.replace(llama, batch=start)
    room = room_for(request, target, extra=MiB)
    want = truth(request, room, 2 * max(start, target) + 2)
    assert want is not None and want >= target
    counted = Counted()
    assert largest_batch(request, room, counted, CONTEXT_BYTES) == want
    assert len(counted.batches) == len(set(counted.batches))  # each batch estimated once
    assert len(counted.batches) <= MAX_PROBES


def test_none_when_not_even_batch_one_fits(llama):
    room = room_for(llama, 1) - 1
    counted = Counted()
    assert largest_batch(llama, room, counted, CONTEXT_BYTES) is None
    assert counted.batches[-1] == 1 and len(counted.batches) <= MAX_PROBES


def test_a_roomy_gpu_stops_at_the_cap(llama):
    room = room_for(llama, 64)
    assert largest_batch(llama, room, Counted(), CONTEXT_BYTES, max_batch=32) == 32


def test_out_of_tries_the_answer_is_a_batch_that_fits(llama):
    room = room_for(llama, 37, extra=MiB)
    counted = Counted()
    found = largest_batch(llama, room, counted, CONTEXT_BYTES, max_probes=3)
    assert len(counted.batches) == 3
    assert found is not None and found <= 37
    assert room_for(llama, found) <= room
