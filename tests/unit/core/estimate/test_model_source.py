"""What ``--model`` names: folders and config files of transformers and
diffusers models, ``module:function`` sources, and the errors for the rest."""

from __future__ import annotations

import json

import pytest

from tests.unit.core.estimate.tiny_models import real_model, save_all

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from app.core.estimate.model_source import build, resolve  # noqa: E402
from app.core.estimate.types import EstimateError, StepRequest  # noqa: E402

FIXTURES = "tests.unit.core.estimate.fixtures.step_models"


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    return save_all(tmp_path_factory.mktemp("models"))


def test_a_folder_and_its_config_file_name_the_same_class(folders):
    for name, cls in (("gpt2", "GPT2LMHeadModel"), ("resnet", "ResNetForImageClassification")):
        assert resolve(folders[name]).class_name == cls
        assert resolve(folders[name] + "/config.json").class_name == cls
    unet = resolve(folders["unet"])
    assert (unet.origin, unet.class_name) == ("diffusers", "UNet2DConditionModel")


def test_without_architectures_the_model_type_picks_the_class(tmp_path):
    cases = {"llama": transformers.LlamaConfig(num_hidden_layers=1, hidden_size=64,
                                               num_attention_heads=2, intermediate_size=128),
             "vit": transformers.ViTConfig(num_hidden_layers=1, hidden_size=32,
                                           num_attention_heads=2, intermediate_size=64),
             "clip_text_model": transformers.CLIPTextConfig(num_hidden_layers=1)}
    found = {}
    for kind, config in cases.items():
        config.save_pretrained(tmp_path / kind)
        found[kind] = resolve(str(tmp_path / kind)).class_name
    assert found == {"llama": "LlamaForCausalLM", "vit": "ViTForImageClassification",
                     "clip_text_model": "CLIPTextModel"}


def test_the_fake_build_is_the_real_model(folders):
    for name in ("gpt2", "unet"):
        request = StepRequest(folders[name], batch=3, train=True)
        with torch._subclasses.fake_tensor.FakeTensorMode():
            fake = build(request, fake=True)
            fake_shapes = {k: tuple(v.shape) for k, v in fake.module.state_dict().items()}
        real = build(request, fake=False)
        assert fake.params == real.params == sum(
            p.numel() for p in real_model(folders[name]).parameters())
        assert fake_shapes == {k: tuple(v.shape) for k, v in real.module.state_dict().items()}
        assert {k: tuple(v.shape) for k, v in fake.batch.items()} == \
            {k: tuple(v.shape) for k, v in real.batch.items()}
        assert real.module.training and fake.module.training


def test_example_batches_follow_the_config(folders):
    def shapes(name, **kw):
        request = StepRequest(folders[name], **{"batch": 2, **kw})
        built = build(request, fake=False)
        return {k: tuple(v.shape) for k, v in built.batch.items() if hasattr(v, "shape")}

    # 512 tokens by default, capped at the model's positions (GPT-2 here: 256)
    assert shapes("gpt2") == {"input_ids": (2, 256)}
    assert shapes("gpt2", seq=32, train=True) == {"input_ids": (2, 32), "labels": (2, 32)}
    assert shapes("vit", train=True) == {"pixel_values": (2, 3, 32, 32), "labels": (2,)}
    assert shapes("resnet", image=48) == {"pixel_values": (2, 3, 48, 48)}
    # a UNet's latents are the image over the VAE's 8; by default its sample_size
    assert shapes("unet") == {"sample": (2, 4, 16, 16), "timestep": (2,),
                              "encoder_hidden_states": (2, 77, 32)}
    assert shapes("unet", image=64)["sample"] == (2, 4, 8, 8)


def test_dtype_and_lora_are_applied_to_the_real_build_too(folders):
    built = build(StepRequest(folders["llama"], dtype="bfloat16", train=True, lora_rank=2),
                  fake=False)
    params = dict(built.module.named_parameters())
    trainable = {n for n, p in params.items() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)
    assert {params[n].dtype for n in params if n not in trainable} == {torch.bfloat16}
    # peft keeps the adapters in float32 over half-precision weights (its default)
    assert {params[n].dtype for n in trainable} == {torch.float32}
    assert built.model_name == "LlamaForCausalLM with LoRA r=2"


def test_a_function_source_is_called_with_the_batch(monkeypatch, tmp_path):
    (tmp_path / "my_models.py").write_text(
        "import torch\n"
        "def tiny(batch, seq=5):\n"
        "    return torch.nn.Embedding(10, 4), torch.zeros(batch, seq, dtype=torch.long)\n")
    monkeypatch.chdir(tmp_path)  # the current folder is where the module is found
    built = build(StepRequest("my_models:tiny", batch=3, seq=7), fake=False)
    assert tuple(built.batch.shape) == (3, 7)
    assert built.model_name == "Embedding" and built.params == 40 and not built.limits


@pytest.mark.parametrize("model, says", [
    ("/nonexistent/model", "no such file or folder"),
    (f"{FIXTURES}:nope", "has no function nope"),
    ("no_such_package_here:build", "cannot import no_such_package_here"),
    (f"{FIXTURES}:broken", "broken() failed: RuntimeError: no weights here"),
    (f"{FIXTURES}:not_a_pair", "must return (torch.nn.Module, example_batch)"),
])
def test_bad_sources_say_why(model, says):
    with pytest.raises(EstimateError) as err:
        build(StepRequest(model), fake=False)
    assert says in str(err.value)


def test_bad_folders_say_why(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "pipeline").mkdir()
    (tmp_path / "pipeline" / "model_index.json").write_text("{}")
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "config.json").write_text(json.dumps({"hidden_size": 4}))
    (tmp_path / "odd").mkdir()
    (tmp_path / "odd" / "config.json").write_text(json.dumps({"model_type": "no-such-model"}))
    (tmp_path / "bad.json").write_text("{")
    cases = {"empty": "has no config.json", "pipeline": "name one component folder",
             "plain": "names no model_type", "odd": "transformers cannot read",
             "bad.json": "cannot read"}
    for name, says in cases.items():
        with pytest.raises(EstimateError) as err:
            resolve(str(tmp_path / name))
        assert says in str(err.value), name


def test_a_diffusers_class_without_a_known_batch_says_what_to_do(tmp_path):
    diffusers = pytest.importorskip("diffusers")
    vae = diffusers.AutoencoderKL.from_config(dict(block_out_channels=(32,), latent_channels=4,
                                                   norm_num_groups=32))
    vae.save_config(tmp_path / "vae")
    with pytest.raises(EstimateError) as err:
        build(StepRequest(str(tmp_path / "vae")), fake=False)
    assert "module:function" in str(err.value)
