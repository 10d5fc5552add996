"""An OOM post-mortem's batch that would have fitted: the run rebuilt from the
model its agent reported, the room the process could have had, the search."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import stat

import pytest

from app.core.agents.oom import OomCapture
from app.core.agents.types import AgentReport, DeviceMemory, ModelInfo
from app.core.diagnosis.oom_report import build_report
from app.core.diagnosis.types import OomReport
from app.core.estimate import postmortem as pm
from app.core.estimate.types import Estimate, EstimateError, StepRequest
from app.core.monitor.samples import GpuSample, ProcessSample, Snapshot
from tests.fakes.full_disk import fill, free, small_disk, why_no_tmpfs

MiB, GiB = 1024**2, 1024**3
T = 50_000.0
GPT2 = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_layer": 2, "n_embd": 64,
        "n_head": 2, "vocab_size": 256, "n_positions": 128}
UNET = {"_class_name": "UNet2DConditionModel", "in_channels": 4, "sample_size": 8}


def model(config=GPT2, shape=(8, 128), dtype="float32", training=True, requires_grad=True,
          **kw) -> ModelInfo:
    return ModelInfo("m1", "gpt2", "transformers.GPT2LMHeadModel", 1000, 4000, 0, "cuda:0",
                     dtype, training, T - 1, requires_grad=requires_grad, config=config,
                     input_shape=shape, bytes_by_device={"cuda:0": {"params": 4000}}, **kw)


def oom(models=(), *, others=6 * GiB, own_nvml=14 * GiB, own_reserved=13 * GiB,
        step: int | None = 40, total=24 * GiB, limit=24 * GiB) -> OomReport:
    """The report the Doctor makes from a capture, a snapshot and the agent's report."""
    cap = OomCapture(seq=1, time=T, device=0, uuid="1111", request=2 * GiB, limit=limit,
                     free=100 * MiB, stats={"allocated": own_reserved - GiB,
                                            "reserved": own_reserved}, step=step)
    train = ProcessSample(10, own_nvml, 90.0, command="python train.py")
    other = ProcessSample(20, others, 10.0, command="python serve.py")
    agent = AgentReport(10, ("python", "train.py"), None, "2.5", "loaded", True, "native",
                        (DeviceMemory(0, own_reserved - GiB, own_reserved, uuid="1111"),),
                        tuple(models), received_at=T)
    gpu = GpuSample(0, "NVIDIA A10", "GPU-1111", total, own_nvml + others, 0,
                    processes=(train, other))
    return build_report(cap, 10, [Snapshot(T - 0.5, 0.0, "nvml", "550", (gpu,),
                                           agents={10: agent})], agent)


def test_the_report_keeps_the_model_that_ran_and_it_reads_back():
    idle = dataclasses.replace(model(config=None, shape=None), id="m2", last_used=T - 600)
    report = oom([idle, model()])
    again = OomReport.from_json(json.loads(json.dumps(report.to_json())))
    kept = pm.oom_model(again)
    assert kept is not None and kept.id == "m1"
    assert kept.config == GPT2 and kept.input_shape == (8, 128) and kept.training is True


def test_the_run_is_rebuilt_from_the_input_shape_config_dtype_and_training():
    report = oom([model()])
    req = pm.oom_request(report, pm.oom_model(report), "/x")
    assert req == StepRequest("/x", batch=8, seq=128, dtype="float32", train=True)
    no_step = oom([model(requires_grad=False)], step=None)
    assert pm.oom_request(no_step, pm.oom_model(no_step), "/x").train is False
    eval_mode = oom([model(training=False)])
    assert pm.oom_request(eval_mode, pm.oom_model(eval_mode), "/x").train is False


def test_images_and_latents_give_the_image_side():
    assert pm.ran_shape(model(config={"model_type": "vit"}, shape=(32, 3, 224, 224))) == \
        pm.RanShape(32, image=224)
    assert pm.ran_shape(model(config=UNET, shape=(2, 4, 64, 64))) == pm.RanShape(2, image=512)
    pixels = dict(UNET, _class_name="UNet2DModel", in_channels=3)
    assert pm.ran_shape(model(config=pixels, shape=(2, 3, 64, 64))) == pm.RanShape(2, image=64)
    assert pm.ran_shape(model(shape=(2, 3, 4, 5, 6))) is None


def test_the_room_is_the_card_less_the_others_and_the_process_own_context():
    report = oom([model()], others=6 * GiB, own_nvml=14 * GiB, own_reserved=13 * GiB)
    room = pm.room_at_oom(report, 999)
    assert room == pm.Room(24 * GiB - 6 * GiB, GiB)  # 14 GiB on NVML, 13 of them reserved
    capped = oom([model()], limit=12 * GiB)  # torch.cuda.set_per_process_memory_fraction
    assert pm.room_at_oom(capped, 999) == pm.Room(12 * GiB + GiB, GiB)


def test_why_unknown_says_what_is_missing():
    assert pm.why_unknown(oom([]), None).startswith("the OOM's model is not known")
    no_config = oom([model(config=None)])
    assert pm.why_unknown(no_config, pm.oom_model(no_config)) == \
        "the model's config is not known"
    assert pm.batch_that_fits(no_config, pm.oom_model(no_config)) is None
    mixed = oom([model(dtype="mixed")])
    assert "mixed" in pm.why_unknown(mixed, pm.oom_model(mixed))
    report = oom([model()])
    assert pm.why_unknown(report, pm.oom_model(report)) is None


def test_the_config_is_written_privately_and_removed():
    with pm.written_config(GPT2) as folder:
        path = os.path.join(folder, "config.json")
        with open(path) as f:
            assert json.load(f) == GPT2
        assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert not os.path.exists(folder)


def _linear(per_sample: int, fixed: int):
    """An estimate growing by ``per_sample`` reserved bytes a sample (the search's input)."""
    asked: list[StepRequest] = []

    def reestimate(req: StepRequest) -> Estimate:
        asked.append(req)
        reserved = fixed + per_sample * req.batch
        return Estimate(req, "test", "m", 1, reserved, reserved, {}, ("activations",),
                        "forward", True)
    return reestimate, asked


def test_the_proposal_is_the_largest_batch_below_the_one_that_ran_that_fits():
    report = oom([model(shape=(32, 128))])  # room 18 GiB, context 1 GiB
    reestimate, asked = _linear(GiB, 2 * GiB)  # batch b needs 2 + b + 1 GiB
    got = pm.batch_that_fits(report, pm.oom_model(report), reestimate)
    assert got is not None and (got.batch, got.ran_batch) == (15, 32)
    assert got.needs_bytes == 18 * GiB and got.room_bytes == 18 * GiB
    assert got.ran_needs_bytes == 35 * GiB
    assert got.text.startswith("Batch 15 would have fitted (it ran 32): needs 18.0 GiB of the "
                               "18.0 GiB")
    assert all(r.seq == 128 and r.train for r in asked)
    assert len({r.batch for r in asked}) == len(asked)  # each batch estimated once


def test_a_batch_that_should_have_fitted_and_one_that_never_could_are_said():
    report = oom([model(shape=(4, 128))])
    fits, _ = _linear(GiB, 2 * GiB)  # batch 4: 7 GiB of 18
    got = pm.batch_that_fits(report, pm.oom_model(report), fits)
    assert got is not None and got.batch == 4
    assert "the batch alone does not explain the OOM" in got.text
    never, _ = _linear(GiB, 40 * GiB)
    got = pm.batch_that_fits(report, pm.oom_model(report), never)
    assert got is not None and got.batch is None and got.text.startswith("Not even batch 1")


@pytest.mark.skipif(importlib.util.find_spec("app.core.estimate.fake_step") is None,
                    reason="the fake-tensor step is not there yet")
def test_a_real_estimate_of_a_tiny_gpt2_proposes_a_smaller_batch():
    pytest.importorskip("transformers")
    from app.core.estimate.run import estimate

    probe = model(shape=(1, 128))
    with pm.written_config(GPT2) as folder:
        one = estimate(pm.oom_request(oom([probe]), probe, folder))
        eight = estimate(dataclasses.replace(pm.oom_request(oom([probe]), probe, folder),
                                             batch=8))
    # a card with room for batch 4's step and its context, but not batch 8's
    per_sample = (eight.reserved_bytes - one.reserved_bytes) / 7
    room = int(one.reserved_bytes + 4.5 * per_sample)
    report = oom([model(shape=(8, 128))], others=0, own_nvml=GiB + 13 * GiB,
                 own_reserved=13 * GiB, total=room + GiB, limit=room + GiB)
    got = pm.batch_that_fits(report, pm.oom_model(report))
    assert got is not None and got.ran_batch == 8 and got.batch is not None
    assert 1 <= got.batch < 8 and got.needs_bytes <= got.room_bytes < got.ran_needs_bytes


@pytest.mark.skipif(why_no_tmpfs() is not None, reason=why_no_tmpfs() or "")
def test_a_full_disk_is_an_estimate_error_that_leaves_nothing(tmp_path, monkeypatch):
    import tempfile

    with small_disk(tmp_path / "disk", "1m") as disk:
        monkeypatch.setattr(tempfile, "tempdir", str(disk))
        fill(disk)
        try:
            with pytest.raises(EstimateError, match="could not be written.*No space left"), \
                    pm.written_config(GPT2):
                pass
        finally:
            free(disk)
        assert os.listdir(disk) == []
