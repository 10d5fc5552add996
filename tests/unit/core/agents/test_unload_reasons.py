"""The app reads the agent's words: every refusal the agent can give refuses
any unload, and only training evidence gives way to ``force``."""

from __future__ import annotations

import pytest

from app.agent import eligibility
from app.core.agents.unload_reasons import overridable, refuses_any_unload

LABELS = [*eligibility.REFUSALS,
          "quantized packed weights (torch.ao dynamic quantization)",
          "quantized packed weights (torch.ao static quantization)",
          "quantized packed weights (torch.ao quantization)"]


@pytest.mark.parametrize("label", LABELS)
def test_every_blocker_and_its_sentence_refuse_any_unload(label):
    for text in (label, eligibility.refusal(label)):
        assert refuses_any_unload(text) and not overridable(text), text


def test_a_hookless_model_names_one_reason():
    hookless = [k for k in eligibility.REFUSALS if k.startswith("no agent hooks")]
    assert len(hookless) == 4
    sentences = [eligibility.refusal(k) for k in hookless]
    assert len(set(sentences)) == 4
    assert sum("VRAM_STEWARD_LAST_USED" in s for s in sentences) == 1
