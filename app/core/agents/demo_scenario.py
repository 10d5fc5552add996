"""The demo's simulated agents: which demo process has one, and the models it holds.

Sizes are those of the real models (parameter counts of ResNet-50,
StableDiffusion 1.5's UNet / CLIP text encoder / VAE, BERT base and
MiniLM), so the breakdown bars look as they would for those jobs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.core.monitor.demo_source import MiB


@dataclass(frozen=True, slots=True)
class DemoModel:
    name: str
    class_name: str
    params: int
    bytes_per_param: int
    buffer_bytes: int
    training: bool  # train mode, stepped by an optimizer every iteration
    group: str | None = None
    use_offset_s: float = 0.0  # when, within one use of its process, it runs its forward
    unload_blocker: str | None = None  # why any unload would be refused (none in the demo)
    config: dict[str, Any] | None = None  # what its agent reads of ``model.config``
    input_shape: tuple[int, ...] | None = None  # its last call's first tensor

    @property
    def training_evidence(self) -> str | None:
        return "train mode" if self.training else None

    @property
    def param_bytes(self) -> int:
        return self.params * self.bytes_per_param

    @property
    def dtype(self) -> str:
        return {2: "float16", 4: "float32"}[self.bytes_per_param]


@dataclass(frozen=True, slots=True)
class AgentSpec:
    match: str  # a fragment of the demo process's command line
    context: int  # bytes NVML counts outside the caching allocator
    alloc_fixed: int  # allocated = alloc_fixed + alloc_frac * (natural reserved - alloc_fixed)
    alloc_frac: float
    models: tuple[DemoModel, ...]
    idle_s: float | None  # seconds since the last forward (None: in use now)
    gc_objects: int = 0
    # None: used all the time (``idle_s`` behind); else used every this many
    # seconds of its life (the first time one period in), idle ``idle_s`` before.
    use_every_s: float | None = None
    # Seconds before its process's simulated life began that its agent first saw
    # the models (0: at that start).
    seen_before_s: float = 0.0


#: sentence-transformers/all-MiniLM-L6-v2's config.json, as its agent reads it from the
#: loaded ``BertModel`` (22,713,216 parameters: the count below).
MINILM_CONFIG: dict[str, Any] = {
    "architectures": ["BertModel"], "attention_probs_dropout_prob": 0.1,
    "gradient_checkpointing": False, "hidden_act": "gelu", "hidden_dropout_prob": 0.1,
    "hidden_size": 384, "initializer_range": 0.02, "intermediate_size": 1536,
    "layer_norm_eps": 1e-12, "max_position_embeddings": 512, "model_type": "bert",
    "num_attention_heads": 12, "num_hidden_layers": 6, "pad_token_id": 0,
    "position_embedding_type": "absolute", "type_vocab_size": 2, "use_cache": True,
    "vocab_size": 30522}
#: Its last call, ``model(**batch)``: 2048 texts of 128 tokens, whose attention
#: scores (2048 × 12 heads × 128 × 128 float32) are the 1.5 GiB its OOM asks for.
MINILM_BATCH = (2048, 128)

SPECS = (
    AgentSpec(  # cache saw-tooths over each 45 s period; live tensors stay put
        "train.py", 528 * MiB, int(12.5 * 1024) * MiB - 528 * MiB, 0.0,
        (DemoModel("model", "torchvision.models.resnet.ResNet", 25_557_032, 4, 212_904,
                training=True),),
        idle_s=None, gc_objects=412),
    AgentSpec(  # an idle notebook holding a fp16 pipeline and a sizeable cache
        "ipykernel", 472 * MiB, 2100 * MiB, 0.0,
        (DemoModel("pipe.unet",
                   "diffusers.models.unets.unet_2d_condition.UNet2DConditionModel",
                   859_520_964, 2, 0, False, "StableDiffusionPipeline", use_offset_s=4.0),
         DemoModel("pipe.text_encoder", "transformers.models.clip.modeling_clip.CLIPTextModel",
                   123_060_480, 2, 616, False, "StableDiffusionPipeline", use_offset_s=0.05),
         DemoModel("pipe.vae", "diffusers.models.autoencoders.autoencoder_kl.AutoencoderKL",
                   83_653_863, 2, 0, False, "StableDiffusionPipeline", use_offset_s=4.3)),
        idle_s=2 * 3600 + 17 * 60, gc_objects=9_031,
        use_every_s=1200.0,  # ... until its user comes back every 20 minutes
        seen_before_s=2 * 3600 + 17 * 60 + 25 * 60),  # loaded, used for 25 min, left
    AgentSpec(
        "eval.py", 506 * MiB, 437_928_960 + 8192, 0.55,
        (DemoModel("bert-base-uncased",
                "transformers.models.bert.modeling_bert.BertForSequenceClassification",
                109_483_778, 4, 8192, training=False),),
        idle_s=None, gc_objects=57),
    AgentSpec(
        # its leak is live tensors (outputs kept in a list): little of it is cache
        "serve_embeddings.py", 458 * MiB, 90_852_864 + 8192, 0.97,
        (DemoModel("encoder", "transformers.models.bert.modeling_bert.BertModel", 22_713_216, 4,
                8192, training=False, config=MINILM_CONFIG, input_shape=MINILM_BATCH),),
        idle_s=1.3, gc_objects=3),
)
