"""The fake-tensor step against real models built from small configs: what it
measures is checked against the models' own parameters, against each other
mode of the same model, and against a real CPU step's allocations."""

from __future__ import annotations

import dataclasses

import pytest

from tests.unit.core.estimate.tiny_models import buffer_bytes, param_bytes, real_model, save_all

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("diffusers")

from app.core.estimate.fake_step import (  # noqa: E402
    AUTOCAST_LIMIT,
    FAKE_CPU_LIMIT,
    estimate_step,
    measure,
    run_step,
)
from app.core.estimate.model_source import build  # noqa: E402
from app.core.estimate.step_modes import make_optimizer  # noqa: E402
from app.core.estimate.types import KINDS, StepRequest  # noqa: E402

MODELS = ("gpt2", "llama", "resnet", "vit", "unet")
SIZES = {"gpt2": dict(seq=64), "llama": dict(seq=64), "bert": dict(seq=64),
         "bert-cls": dict(seq=64), "bert-base": dict(seq=64), "t5": dict(seq=64),
         "resnet": dict(image=64), "vit": {}, "unet": {}}


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    return save_all(tmp_path_factory.mktemp("models"))


def request_for(folders, name: str, **kw) -> StepRequest:
    return StepRequest(folders[name], **{"batch": 2, **SIZES[name], **kw})


def weights_of(folder: str) -> int:
    model = real_model(folder)
    return param_bytes(model) + buffer_bytes(model)


@pytest.mark.parametrize("name", MODELS)
def test_inference_holds_weights_and_activations_only(folders, name):
    est = estimate_step(request_for(folders, name))
    model = real_model(folders[name])
    assert est.method == "fake-tensor step" and est.exact
    assert est.model_name == type(model).__name__
    assert est.params == sum(p.numel() for p in model.parameters())
    assert est.breakdown["weights"] == param_bytes(model) + buffer_bytes(model)
    assert est.breakdown["gradients"] == est.breakdown["optimizer"] == 0
    assert est.breakdown["activations"] > 0
    assert set(est.breakdown) == set(KINDS)
    assert sum(est.breakdown.values()) == est.peak_bytes
    assert est.reserved_bytes >= est.peak_bytes
    assert est.peak_phase == "forward"
    assert "activations" in est.scales_with_batch and "weights" not in est.scales_with_batch
    assert FAKE_CPU_LIMIT in est.limits
    assert est.seconds is not None and est.seconds > 0


@pytest.mark.parametrize("name", MODELS)
def test_training_adds_gradients_and_adamw_state(folders, name):
    infer = estimate_step(request_for(folders, name), scaling=False)
    est = estimate_step(request_for(folders, name, train=True), scaling=False)
    model = real_model(folders[name])
    trainable = param_bytes(model, trainable_only=True)
    tensors = sum(1 for p in model.parameters() if p.requires_grad)
    assert est.breakdown["weights"] == infer.breakdown["weights"]
    # AdamW keeps two fp32 moments per parameter (and a 4-byte step count per tensor)
    # from the first step on, so they are whole at any peak of the second step.
    assert 2 * trainable <= est.breakdown["optimizer"] <= 2 * trainable + 4 * tensors
    assert 0 <= est.breakdown["gradients"] <= trainable
    assert est.peak_bytes > infer.peak_bytes
    assert sum(est.breakdown.values()) == est.peak_bytes
    assert est.peak_phase in ("forward", "backward", "optimizer step")
    if est.peak_phase == "optimizer step":  # every gradient exists until zero_grad
        assert est.breakdown["gradients"] == trainable


def test_the_trace_and_the_tracker_agree_on_the_peak(folders):
    for name, train in (("gpt2", True), ("unet", False), ("vit", True)):
        request = request_for(folders, name, train=train)
        with torch._subclasses.fake_tensor.FakeTensorMode():
            built = build(request, fake=True)
            optimizer = make_optimizer(built.module, "adamw") if train else None
            measured = measure(built, request, optimizer, built.batch)
        assert measured.trace_peak_bytes == measured.peak_bytes, name
        assert measured.events and all(nbytes >= 0 for _key, nbytes in measured.events)


def _real_peak(request: StepRequest) -> int:
    """The real CPU step's peak: what is alive before it plus the profiler's memory events."""
    from torch.profiler import ProfilerActivity, profile

    from app.core.estimate.fake_step import optimizer_state
    from app.core.estimate.step_modes import tensors_of
    from app.core.estimate.trace import storage_bytes

    built = build(request, fake=False)
    optimizer = make_optimizer(built.module, request.optimizer) if request.train else None
    if request.train:
        run_step(built.module, built.batch, request, optimizer)
    alive = storage_bytes([*built.module.parameters(), *built.module.buffers(),
                           *tensors_of(built.batch), *optimizer_state(optimizer)])
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        run_step(built.module, built.batch, request, optimizer)
    events = sorted((e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"),
                    key=lambda e: e.start_ns())
    now = peak = 0
    for event in events:
        now += event.nbytes()
        peak = max(peak, now)
    return alive + peak


@pytest.mark.parametrize("train", [False, True])
def test_the_fake_peak_is_the_real_cpu_steps_peak(folders, train):
    request = request_for(folders, "gpt2", train=train)
    fake = estimate_step(request, scaling=False, kernels="cpu").peak_bytes  # as run here
    real = _real_peak(request)
    assert abs(fake - real) <= 0.01 * real


def test_lora_trains_far_less_than_the_whole_model(folders):
    full = estimate_step(request_for(folders, "llama", train=True), scaling=False)
    lora = estimate_step(request_for(folders, "llama", train=True, lora_rank=4), scaling=False)
    assert lora.model_name == "LlamaForCausalLM with LoRA r=4"
    assert lora.params > full.params  # the adapters are added, the base stays
    assert lora.breakdown["weights"] > full.breakdown["weights"]
    small = ("gradients", "optimizer")
    assert sum(lora.breakdown[k] for k in small) < 0.2 * sum(full.breakdown[k] for k in small)
    assert lora.peak_bytes < full.peak_bytes


def test_lora_on_a_unet_adapts_its_attention(folders):
    full = estimate_step(request_for(folders, "unet", train=True), scaling=False)
    lora = estimate_step(request_for(folders, "unet", train=True, lora_rank=4), scaling=False)
    assert 0 < lora.breakdown["optimizer"] < 0.1 * full.breakdown["optimizer"]


def test_checkpointing_keeps_fewer_activations(folders):
    plain = estimate_step(request_for(folders, "gpt2", train=True, seq=256, batch=4),
                          scaling=False)
    kept = estimate_step(request_for(folders, "gpt2", train=True, seq=256, batch=4,
                                     checkpointing=True), scaling=False)
    assert plain.peak_phase != "optimizer step"  # activations make this peak
    assert kept.breakdown["activations"] < plain.breakdown["activations"]
    assert kept.peak_bytes < plain.peak_bytes
    assert not [s for s in kept.limits if "checkpointing" in s]


def test_a_model_without_checkpointing_says_so(folders):
    est = estimate_step(request_for(folders, "resnet", train=True, checkpointing=True),
                        scaling=False)
    assert any("no gradient checkpointing" in s for s in est.limits)


def test_bfloat16_halves_the_weights(folders):
    fp32 = estimate_step(request_for(folders, "llama"), scaling=False)
    bf16 = estimate_step(request_for(folders, "llama", dtype="bfloat16"), scaling=False)
    assert 2 * bf16.breakdown["weights"] == fp32.breakdown["weights"]
    assert bf16.peak_bytes < fp32.peak_bytes


def test_autocast_keeps_float32_weights_and_says_how_it_casts(folders):
    fp32 = estimate_step(request_for(folders, "gpt2", train=True), scaling=False)
    mixed = estimate_step(request_for(folders, "gpt2", train=True, autocast="bfloat16"),
                          scaling=False)
    assert mixed.breakdown["weights"] == fp32.breakdown["weights"]
    assert mixed.breakdown["activations"] < fp32.breakdown["activations"]
    assert AUTOCAST_LIMIT in mixed.limits and AUTOCAST_LIMIT not in fp32.limits


def test_each_optimizer_keeps_its_own_state(folders):
    trainable = param_bytes(real_model(folders["llama"]), trainable_only=True)
    state = {name: estimate_step(request_for(folders, "llama", train=True, optimizer=name),
                                 scaling=False).breakdown["optimizer"]
             for name in ("sgd", "sgd-momentum", "adam", "adafactor")}
    assert state["sgd"] == 0
    assert state["sgd-momentum"] == trainable
    assert 2 * trainable <= state["adam"] < 2 * trainable + 4096
    assert 0 < state["adafactor"] < 0.2 * trainable  # factored second moments


def test_what_scales_with_the_batch_is_measured(folders):
    est = estimate_step(request_for(folders, "gpt2", train=True))
    assert "activations" in est.scales_with_batch
    assert not {"weights", "gradients", "optimizer"} & set(est.scales_with_batch)
    bigger = estimate_step(dataclasses.replace(est.request, batch=4), scaling=False)
    assert bigger.peak_bytes > est.peak_bytes
    assert bigger.breakdown["weights"] == est.breakdown["weights"]


@pytest.mark.parametrize("name, cls", [("bert", "BertForMaskedLM"),
                                       ("bert-cls", "BertForSequenceClassification"),
                                       ("bert-base", "BertModel"),
                                       ("t5", "T5ForConditionalGeneration")])
def test_other_heads_train_on_their_own_labels_or_their_output(folders, name, cls):
    est = estimate_step(request_for(folders, name, train=True), scaling=False)
    model = real_model(folders[name])
    weights, tensors = param_bytes(model), len(list(model.parameters()))
    assert est.model_name == cls and est.exact
    assert est.breakdown["activations"] > 0
    assert 0 < est.breakdown["optimizer"] <= 2 * weights + 4 * tensors
    if name != "bert-base":  # a head's loss reaches every parameter
        assert est.breakdown["optimizer"] >= 2 * weights
    else:  # trained on its hidden states, the pooler gets no gradient, hence no state
        assert est.breakdown["optimizer"] < 2 * weights
