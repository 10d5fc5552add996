"""The fake-tensor estimate against the real step on the CPU: for GPT-2, a small
Llama, a ResNet, a ViT and a diffusers UNet built from config folders,
inference and AdamW training, ``peak_bytes`` is within 10 % of the peak of live
bytes the real step reaches (``torch.profiler``'s memory events, summed from
before the model is built, in a child process)."""

from __future__ import annotations

import pytest

from tests.fakes.accuracy_models import MODELS
from tests.fakes.estimate_accuracy import MODES, accuracy

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("diffusers")

TOLERANCE = 0.10


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    """Every row; the real steps run in one child while the estimates are made here."""
    found = accuracy(list(MODELS), tmp_path_factory.mktemp("models"), per_child=False,
                     scaling=False)
    return {(r["model"], r["mode"]): r for r in found}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", list(MODELS))
def test_the_estimated_peak_is_within_10_percent_of_the_real_one(rows, name, mode):
    row = rows[(name, mode)]
    real, estimated = row["real_peak_bytes"], row["estimated_peak_bytes"]
    assert row["exact"]
    assert abs(estimated - real) <= TOLERANCE * real, row
    # The caching allocator's segments hold at least the tensors.
    assert row["estimated_reserved_bytes"] >= estimated
