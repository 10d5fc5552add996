"""The fit of an estimate on each GPU's room: needs against free memory, and
where it does not fit, the fixes ranked as the Doctor ranks its own.

The ranking tests size the run with a simple stand-in for the estimate (the
ranking is what they are about); the context test sizes a real GGUF file with
the real formula."""

from __future__ import annotations

import dataclasses

import pytest

from app.core.estimate.context import fresh_process_bytes
from app.core.estimate.fit import LORA_RANK, fit_gpus, largest_batch_on
from app.core.estimate.rooms import Freeable, GpuRoom
from app.core.estimate.run import estimate
from app.core.estimate.types import Estimate, EstimateError, StepRequest
from app.core.units import fmt_bytes

MiB = 1024**2
GiB = 1024**3
NAME = "NVIDIA RTX A6000"
CONTEXT = fresh_process_bytes(NAME)  # the context, and the cuBLAS workspaces in the allocator


class Sizer:
    """A stand-in estimate: weights, gradients and Adam state by dtype and LoRA,
    activations by batch, checkpointing and autocast; it counts its calls."""

    def __init__(self, activations_per_sample: int = 1 * GiB, lora: bool = True,
                 checkpointing_saves: bool = True) -> None:
        self.per_sample = activations_per_sample
        self.lora = lora
        self.checkpointing_saves = checkpointing_saves
        self.calls: list[StepRequest] = []

    def __call__(self, r: StepRequest) -> Estimate:
        self.calls.append(r)
        if r.lora_rank is not None and not self.lora:
            raise EstimateError("LoRA: no linear layers to adapt")
        weights = (4 if r.dtype == "float32" else 2) * GiB
        trained = weights // 50 if r.lora_rank else weights
        per_sample = self.per_sample // (2 if r.autocast else 1)
        if r.checkpointing and self.checkpointing_saves:
            per_sample //= 4
        parts = {"weights": weights, "gradients": trained if r.train else 0,
                 "optimizer": 2 * trained if r.train else 0,
                 "activations": per_sample * r.batch, "temporaries": 0, "kv_cache": 0}
        peak = sum(parts.values())
        return Estimate(r, "fake-tensor step", "Net", 10**9, peak, peak + 64 * MiB, parts,
                        ("activations",), "backward", True)


TRAIN = StepRequest("m:f", batch=16, train=True)


def room(free: int, *freeable: Freeable, gpu: str = "0") -> GpuRoom:
    return GpuRoom(gpu, NAME, 48 * GiB, free, freeable)


def test_a_roomy_gpu_fits_with_its_margin_and_no_fixes():
    sizer = Sizer()
    est = sizer(TRAIN)
    (fit,) = fit_gpus(est, [room(40 * GiB)], reestimate=sizer)
    assert fit.needs_bytes == est.reserved_bytes + CONTEXT
    assert fit.context_bytes == CONTEXT
    assert fit.fits is True and fit.margin_bytes == 40 * GiB - fit.needs_bytes
    assert fit.fixes == ()


def test_unknown_free_memory_is_no_verdict():
    sizer = Sizer()
    est = sizer(TRAIN)
    (fit,) = fit_gpus(est, [GpuRoom("1", None, None, None)], reestimate=sizer)
    assert fit.fits is None and fit.margin_bytes is None and fit.fixes == ()
    assert fit.needs_bytes == est.reserved_bytes + fresh_process_bytes(None)


def test_frees_come_first_counted_together_then_the_changes_to_the_run():
    sizer = Sizer()
    est = sizer(TRAIN)  # 28 GiB + 64 MiB reserved
    free = est.reserved_bytes + CONTEXT - 3 * GiB  # short by 3 GiB
    freeable = (Freeable("free_cache", "train.py (10)", 1 * GiB, 10),
                Freeable("unload_model", "notebook (30)", 1536 * MiB, 30, "m2", "unet", 900.0),
                Freeable("unload_model", "notebook (30)", 1 * GiB, 30, "m1", "vae", 700.0),
                Freeable("stop_process", "old.py (40)", 5 * GiB, 40))
    (fit,) = fit_gpus(est, [room(free, *freeable)], reestimate=sizer)
    assert fit.fits is False and fit.margin_bytes == -3 * GiB
    actions = [f.action for f in fit.fixes]
    # The vae's 1 GiB completes the 3 GiB: stopping a process is not needed.
    assert actions == ["free_cache", "unload_model", "unload_model",
                       "batch", "checkpointing", "bfloat16", "lora"]
    assert [f.fits_after for f in fit.fixes[:3]] == [False, False, True]
    first, second, third = fit.fixes[:3]
    assert first.text == ("Free the cache of train.py (10): gives 1.0 GiB — still short by "
                          "2.0 GiB")
    assert (second.pid, second.model, second.gain_bytes) == (30, "m2", 1536 * MiB)
    assert "Unload unet from notebook (30) (idle 15 min 00 s): gives 1.5 GiB" in second.text
    assert third.text.endswith("with the ones above, it fits")
    batch = fit.fixes[3]
    assert batch.value == 13 and batch.fits_after  # 3 GiB less activations: 3 samples fewer
    assert batch.text.startswith("Batch 13 instead of 16, the largest that fits (--batch 13)")
    assert batch.gain_bytes == 3 * GiB
    ckpt = fit.fixes[4]
    assert ckpt.fits_after and ckpt.gain_bytes == 12 * GiB
    assert fmt_bytes(fit.needs_bytes - 12 * GiB) in ckpt.text
    bf16 = fit.fixes[5]
    assert (bf16.value, bf16.gain_bytes, bf16.fits_after) == ("bfloat16", 8 * GiB, True)
    assert "--autocast bfloat16" in bf16.text
    lora = fit.fixes[6]
    assert lora.value == LORA_RANK and lora.fits_after


def test_a_change_that_helps_but_does_not_fit_says_by_how_much_and_one_that_cannot_be_made_is_left_out():
    sizer = Sizer(lora=False, checkpointing_saves=False)
    est = sizer(dataclasses.replace(TRAIN, batch=2))
    free = CONTEXT + 8 * GiB  # weights + Adam alone are 12 GiB
    (fit,) = fit_gpus(est, [room(free)], reestimate=sizer)
    # No batch fits, checkpointing saves nothing here, LoRA cannot be estimated.
    assert [f.action for f in fit.fixes] == ["bfloat16"]
    (bf16,) = fit.fixes
    assert not bf16.fits_after and "still short by" in bf16.text


def test_stopping_a_process_counts_only_what_its_cache_did_not_give():
    sizer = Sizer()
    est = sizer(TRAIN)
    free = est.reserved_bytes + CONTEXT - 4 * GiB
    freeable = (Freeable("free_cache", "old.py (40)", 2 * GiB, 40),
                Freeable("stop_process", "old.py (40)", 3 * GiB, 40))
    (fit,) = fit_gpus(est, [room(free, *freeable)], reestimate=sizer)
    cache, stop = fit.fixes[:2]
    assert stop.action == "stop_process" and not stop.fits_after  # 2 + 1 GiB, not 2 + 3
    assert stop.text.endswith("still short by 1.0 GiB")


def test_each_changed_request_is_estimated_once_for_every_gpu():
    sizer = Sizer()
    est = sizer(TRAIN)
    sizer.calls.clear()
    short = est.reserved_bytes + CONTEXT - 2 * GiB
    fits = fit_gpus(est, [room(short, gpu="0"), room(short, gpu="1"), room(80 * GiB, gpu="2")],
                    reestimate=sizer)
    assert [f.fits for f in fits] == [False, False, True]
    assert fits[0].fixes == fits[1].fixes
    assert len(sizer.calls) == len(set(sizer.calls)) and TRAIN not in sizer.calls


def test_the_largest_batch_on_a_gpu_is_the_search_on_its_free_memory():
    sizer = Sizer()
    est = sizer(TRAIN)
    (fit,) = fit_gpus(est, [room(est.reserved_bytes + CONTEXT + 5 * GiB + 1)],
                      reestimate=sizer)
    assert largest_batch_on(est, fit, reestimate=sizer) == 21
    unknown = dataclasses.replace(fit, free_bytes=None)
    assert largest_batch_on(est, unknown, reestimate=sizer) is None


def test_a_gguf_that_does_not_fit_is_offered_the_longest_context_that_does(tmp_path):
    pytest.importorskip("gguf")
    from tests.fakes.gguf_files import write_llama_gguf

    path = write_llama_gguf(tmp_path / "tiny.gguf", layers=8, hidden=512, heads=8, kv_heads=8,
                            context=32768, quant="Q8_0")
    request = StepRequest(str(path), context=32768)
    est = estimate(request)
    at_4k = estimate(dataclasses.replace(request, context=4096))
    free = at_4k.reserved_bytes + CONTEXT + 16 * MiB
    assert est.reserved_bytes + CONTEXT > free
    (fit,) = fit_gpus(est, [room(free)], reestimate=estimate)
    (ctx,) = [f for f in fit.fixes if f.action == "context"]
    assert ctx.fits_after and isinstance(ctx.value, int) and 4096 <= ctx.value < 32768
    assert estimate(dataclasses.replace(request, context=ctx.value)).reserved_bytes \
        + CONTEXT <= free
    longer = estimate(dataclasses.replace(request, context=ctx.value + 256))
    assert longer.reserved_bytes + CONTEXT > free
    assert f"Context {ctx.value} instead of 32768" in ctx.text
