"""The optional libraries an estimate runs on (torch, transformers, diffusers,
peft): imported only when an estimate needs them, with the command that
installs them when they are missing, and their own warnings and info logs
kept off the user's terminal (the estimate says what matters in its limits).
"""

from __future__ import annotations

import importlib
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType

from app.core.estimate.types import EstimateError

INSTALL_HINT = 'pip install "vram-steward[estimate]"'


def need(name: str) -> ModuleType:
    """Import ``name`` or say what to install."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise EstimateError(f"the estimate needs {name.split('.')[0]} ({exc}): "
                            f"{INSTALL_HINT}") from exc


@contextmanager
def quiet() -> Iterator[None]:
    """Library warnings and info logs off: the estimate says what matters in its limits."""
    hf_logging = None  # transformers' logger, only where an estimate already imported it
    if "transformers" in sys.modules:
        hf_logging = importlib.import_module("transformers.utils.logging")
        verbosity = hf_logging.get_verbosity()
        hf_logging.set_verbosity_error()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        if hf_logging is not None:
            hf_logging.set_verbosity(verbosity)
