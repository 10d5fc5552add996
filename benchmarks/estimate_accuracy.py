"""The estimate against the real step, on the CPU; and the time of a 7B estimate.

For GPT-2, a small Llama, a ResNet, a ViT (transformers) and a diffusers
UNet2DConditionModel, as config folders (``tests.fakes.accuracy_models``),
inference and AdamW training: the real step's peak of live bytes, measured
from ``torch.profiler``'s memory events in a child process per measurement
(``tests.fakes.real_peak``), next to ``estimate_step``'s ``peak_bytes`` and
``reserved_bytes`` for the same model, batch and step (both built by
``model_source.build`` and run by ``fake_step.run_step``).

    python -m benchmarks.estimate_accuracy [--only NAME] [--json FILE]
    python -m benchmarks.estimate_accuracy --speed [--json FILE]

``--speed`` times the estimate of a Llama-2-7B-shaped config (hidden 4096,
32 layers, 32 heads, intermediate 11008, vocabulary 32000), inference and
training, batch 1, 512 tokens, bfloat16 (target: 10 s each).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.fakes.accuracy_models import MODELS
from tests.fakes.estimate_accuracy import MODES, accuracy

MIB = 1 << 20


def print_table(rows: list[dict[str, Any]]) -> None:
    print(f"{'model':<8}{'mode':<11}{'real MiB':>10}{'est. MiB':>10}{'error %':>9}"
          f"{'est. reserved MiB':>19}{'est. s':>8}")
    for r in rows:
        print(f"{r['model']:<8}{r['mode']:<11}{r['real_peak_bytes'] / MIB:>10.1f}"
              f"{r['estimated_peak_bytes'] / MIB:>10.1f}{r['error_pct']:>+9.1f}"
              f"{r['estimated_reserved_bytes'] / MIB:>19.1f}{r['estimate_seconds']:>8.2f}")


def llama_7b_folder(folder: Path) -> Path:
    from transformers import LlamaConfig

    LlamaConfig(hidden_size=4096, num_hidden_layers=32, num_attention_heads=32,
                num_key_value_heads=32, intermediate_size=11008, vocab_size=32000,
                max_position_embeddings=4096).save_pretrained(folder)
    return folder


def speed() -> list[dict[str, Any]]:
    from app.core.estimate.run import estimate as run_estimate
    from app.core.estimate.types import StepRequest

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = str(llama_7b_folder(Path(tmp)))
        for mode in MODES:
            req = StepRequest(model=folder, batch=1, seq=512, dtype="bfloat16",
                              train=mode == "training", optimizer="adamw")
            start = time.perf_counter()
            est = run_estimate(req)
            seconds = time.perf_counter() - start
            rows.append({"model": "llama-2-7b shape", "mode": mode, "seconds": seconds,
                         "params": est.params, "peak_bytes": est.peak_bytes,
                         "reserved_bytes": est.reserved_bytes})
            print(f"llama-2-7b shape {mode:<10} {seconds:6.2f} s  params {est.params}  "
                  f"peak {est.peak_bytes / MIB:,.0f} MiB  reserved {est.reserved_bytes / MIB:,.0f} MiB")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=list(MODELS), action="append")
    parser.add_argument("--speed", action="store_true", help="time a 7B estimate instead")
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args()
    if args.speed:
        out: Any = {"speed": speed()}
    else:
        with tempfile.TemporaryDirectory() as tmp:
            rows = accuracy(args.only or list(MODELS), Path(tmp))
        print_table(rows)
        worst = max(abs(r["error_pct"]) for r in rows)
        print(f"largest error {worst:.1f} % (target: 10 %)")
        out = {"rows": rows}
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
