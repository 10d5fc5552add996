"""What an agent's blocker or refusal text means: can ``force`` override it?

Qt-free, shared by the CLI and the window.  The agent decides what may be
unloaded; these helpers only read its words so a person is offered a forced
unload where the agent would accept one.  Only training evidence (train mode,
gradients present, a recent optimizer step, backward or forward with autograd) gives way to
``force``, and only for a manual unload.  Everything else the agent names
(torch.compile, torch.export, TorchScript, torch.fx, torch's own machinery,
tensors shared with another model or with other processes, meta placeholders,
sparse, quantized or subclassed tensors, the packed weights of quantized
layers, no agent hooks (whatever the reason), a forward running) refuses any
unload; these helpers offer no ``force`` for anything they do not know either.
Every label and sentence of the agent's ``eligibility.REFUSALS`` reads as such.
``requires_grad`` and "never used" are no reasons at all.
"""

from __future__ import annotations

#: Words of training evidence, as the agent spells it ("training mode": an older agent).
TRAINING_WORDS = ("train mode", "training", "optimizer step", "gradients present", "backward",
                  "autograd")

#: Words of a refusal that no ``force`` overrides (checked first).
NEVER_WORDS = ("compile", "export", "torchscript", "torch.fx", "graphmodule", "cuda graph",
               "torch.func", "torch internals", "machinery",
               "shares tensors", "shared", "meta", "placeholder", "sparse",
               "quantized", "subclass", "tensors on", "unreadable", "hooks", "forward running",
               "forward is running", "is running", "busy", "already", "not offloaded")


def refuses_any_unload(reason: str | None) -> bool:
    """True when the text names something that refuses even a forced unload."""
    text = (reason or "").lower()
    return any(w in text for w in NEVER_WORDS)


def is_training_evidence(reason: str | None) -> bool:
    """True when the text is training evidence, and nothing worse."""
    text = (reason or "").lower()
    return bool(text) and not refuses_any_unload(text) and any(w in text for w in TRAINING_WORDS)


def overridable(reason: str | None) -> bool:
    """True when a refusal may be overridden with ``force`` (the user takes the
    risk): training evidence only."""
    return is_training_evidence(reason)


__all__ = ["NEVER_WORDS", "TRAINING_WORDS", "is_training_evidence", "overridable",
           "refuses_any_unload"]
