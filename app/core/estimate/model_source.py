"""What ``--model`` names, turned into a module and an example batch.

Three kinds of source:

* a Hugging Face model folder or ``config.json``: the class is the config's
  ``architectures[0]`` or, without it, the causal-LM / image-classification /
  base class of its ``model_type``; built from the config alone (local files
  only, nothing is downloaded);
* a diffusers component folder: its ``config.json`` names the class in
  ``_class_name``;
* ``package.module:function`` (the current folder on ``sys.path``): the
  function returns ``(module, example_batch)``.

:func:`build` makes the same model for a fake-tensor estimate and for a real
run, so that a real measurement checks exactly what the estimate sized.  For
the fake estimate the HF and diffusers models are built on the meta device
(no initialisation work), converted and wrapped there, and only then turned
into fake CPU tensors.
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
import re
import sys
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.core.estimate import step_modes
from app.core.estimate.example_batch import example_batch
from app.core.estimate.optional import need, quiet
from app.core.estimate.types import EstimateError, StepRequest

_FUNCTION = re.compile(r"^(?P<module>[A-Za-z_][\w.]*):(?P<function>[A-Za-z_]\w*)$")


@dataclass(frozen=True, slots=True)
class Source:
    """What a ``--model`` names, read without building anything."""

    origin: str  # "transformers", "diffusers" or "function"
    class_name: str  # the module's class ("function" sources: the function's name)
    config: Any  # a transformers config, a diffusers config dict, or None
    function: Callable[..., Any] | None = None


@dataclass(slots=True)
class Built:
    """A model ready for its step, with its example batch."""

    source: Source
    module: Any  # torch.nn.Module
    batch: Any  # a tensor, a tuple of tensors or a dict of them
    model_name: str  # the class, with its LoRA rank
    params: int  # parameters, frozen ones included
    limits: tuple[str, ...]  # what the build could not follow


def is_function(model: str) -> bool:
    return _FUNCTION.match(model) is not None and not Path(model).exists()


def resolve(model: str) -> Source:
    """The source ``model`` names; raises :class:`EstimateError` with the reason."""
    if is_function(model):
        return _function_source(model)
    path = Path(model)
    if not path.exists():
        raise EstimateError(f"no such file or folder: {model}")
    config_path = path / "config.json" if path.is_dir() else path
    if not config_path.is_file():
        hint = " (a diffusers pipeline: name one component folder, e.g. unet/)" \
            if (path / "model_index.json").is_file() else ""
        raise EstimateError(f"{model} has no config.json{hint}")
    try:
        raw = json.loads(config_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise EstimateError(f"cannot read {config_path}: {exc}") from exc
    if not isinstance(raw, dict):
        raise EstimateError(f"{config_path} is not a JSON object")
    if "_class_name" in raw:
        return Source("diffusers", str(raw["_class_name"]), raw)
    return _transformers_source(config_path, raw)


def _function_source(model: str) -> Source:
    match = _FUNCTION.match(model)
    assert match is not None
    module_name, function_name = match["module"], match["function"]
    cwd = os.getcwd()
    added = cwd not in sys.path
    if added:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise EstimateError(f"cannot import {module_name}: {type(exc).__name__}: {exc}") from exc
    finally:
        if added:
            sys.path.remove(cwd)
    function = getattr(module, function_name, None)
    if not callable(function):
        raise EstimateError(f"{module_name} has no function {function_name}")
    return Source("function", function_name, None, function)


def _transformers_source(config_path: Path, raw: dict[str, Any]) -> Source:
    transformers = need("transformers")
    if "model_type" not in raw:
        raise EstimateError(f"{config_path} names no model_type (nor a diffusers _class_name)")
    try:
        with quiet():
            config = transformers.AutoConfig.from_pretrained(
                str(config_path), local_files_only=True)
    except Exception as exc:
        raise EstimateError(f"transformers cannot read {config_path}: {exc}") from exc
    architectures = getattr(config, "architectures", None) or []
    for name in architectures:
        if isinstance(getattr(transformers, name, None), type):
            return Source("transformers", name, config)
    auto = importlib.import_module("transformers.models.auto.modeling_auto")
    for table in ("MODEL_FOR_CAUSAL_LM_MAPPING_NAMES",
                  "MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES", "MODEL_MAPPING_NAMES"):
        name = getattr(auto, table, {}).get(config.model_type)
        if isinstance(name, str) and isinstance(getattr(transformers, name, None), type):
            return Source("transformers", name, config)
    raise EstimateError(f"transformers knows no model class for model_type "
                        f"{config.model_type!r} (architectures: {architectures or 'none'})")


def build(request: StepRequest, *, fake: bool, device: str = "cpu",
          source: Source | None = None) -> Built:
    """The model and batch of ``request``'s step, cast, wrapped and set to its mode.

    ``fake=True`` needs an active ``FakeTensorMode`` (the tensors are fake CPU
    tensors); ``fake=False`` builds real tensors on ``device``, initialised.
    """
    torch = need("torch")
    if fake and step_modes.active_fake_mode() is None:
        raise RuntimeError("build(fake=True) runs under an active FakeTensorMode")
    source = source or resolve(request.model)
    limits: list[str] = []
    with quiet():
        if source.origin == "function":
            module, batch = _call_function(source, request)
            if not fake and device != "cpu":
                module.to(device)
                batch = step_modes.batch_to(batch, device)
            if not _takes(source, "batch"):
                limits.append(f"{source.class_name}() takes no batch argument: the batch is "
                              f"the one it returns.")
        else:
            module, batch = None, None
        # The model is built and wrapped as real tensors: on the meta device for a fake
        # step (fake tensors stay off until to_fake), on ``device`` for a real one.
        with step_modes.real_tensors() if fake else nullcontext(), \
                torch.device("meta" if fake else device):
            if module is None:
                module = _instantiate(source)
            if fake:
                step_modes.to_meta(module)
            step_modes.cast(module, request.dtype)
            if request.train and request.checkpointing:
                limits.extend(step_modes.enable_checkpointing(module))
            if request.lora_rank:
                module = step_modes.add_lora(module, request.lora_rank, source.class_name)
        if fake:
            step_modes.to_fake(module)
        module.train(request.train)
        if batch is None:
            batch = example_batch(source, request, request.batch, device)
    params = sum(p.numel() for p in {id(p): p for p in module.parameters()}.values())
    name = _display_name(module, request)
    return Built(source, module, batch, name, params, tuple(limits))


def _instantiate(source: Source) -> Any:
    if source.origin == "diffusers":
        diffusers = need("diffusers")
        cls = getattr(diffusers, source.class_name, None)
        if cls is None:
            raise EstimateError(f"diffusers has no class {source.class_name}")
        try:
            return cls.from_config(source.config)
        except Exception as exc:
            raise EstimateError(f"{source.class_name}.from_config failed: {exc}") from exc
    transformers = need("transformers")
    cls = getattr(transformers, source.class_name, None)
    if cls is None:
        raise EstimateError(f"transformers {transformers.__version__} has no class "
                            f"{source.class_name}")
    try:
        make = getattr(cls, "_from_config", None) or cls.from_config
        return make(source.config)
    except Exception as exc:
        raise EstimateError(f"{source.class_name} cannot be built from its config: {exc}") from exc


def _call_function(source: Source, request: StepRequest) -> tuple[Any, Any]:
    torch = need("torch")
    assert source.function is not None
    wanted = {"batch": request.batch, "seq": request.seq, "image": request.image}
    kwargs = {k: v for k, v in wanted.items() if v is not None and _takes(source, k)}
    try:
        result = source.function(**kwargs)
    except Exception as exc:
        raise EstimateError(f"{source.class_name}() failed: {type(exc).__name__}: {exc}") from exc
    if not (isinstance(result, tuple) and len(result) == 2
            and isinstance(result[0], torch.nn.Module)):
        raise EstimateError(f"{source.class_name}() must return (torch.nn.Module, example_batch)")
    return result[0], result[1]


def _display_name(module: Any, request: StepRequest) -> str:
    base = getattr(module, "get_base_model", None)
    inner = base() if callable(base) else module
    name = type(inner).__name__
    if request.lora_rank:
        name += f" with LoRA r={request.lora_rank}"
    return name


def _takes(source: Source, argument: str) -> bool:
    """Whether a function source has a parameter named ``argument``."""
    if source.function is None:
        return False
    try:
        return argument in inspect.signature(source.function).parameters
    except (TypeError, ValueError):
        return False
