"""Four threads call one frozen eval model at the same time (a small inference server).

Each thread has fixed inputs and records its own outputs; the model is
unloaded between rounds, so the first calls of the next round race to reload
it (before the last round it is reloaded by hand instead).
"""

import threading

import torch
import zoo

THREADS = 4
CALLS = 5


def one_round(model: torch.nn.Module, inputs: list) -> list:
    results: list = [None] * THREADS
    start = threading.Barrier(THREADS)

    def work(i: int) -> None:
        try:
            start.wait()
            with torch.no_grad():
                results[i] = [model(inputs[i]) for _ in range(CALLS)]
        except Exception as exc:  # recorded, so both runs are compared on it
            results[i] = f"{type(exc).__name__}: {exc}"

    threads = [threading.Thread(target=work, args=(i,)) for i in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def run(ctx) -> None:
    model = zoo.mlp(frozen=True)
    inputs = [zoo.inputs(4, 16, seed=10 + i) for i in range(THREADS)]
    ctx.step("loaded")
    ctx.record("round 0", one_round(model, inputs))
    for n in (1, 2):
        ctx.step(f"between rounds {n - 1} and {n}", unload=["MLP"], expect="unloaded")
        ctx.record(f"round {n}", one_round(model, inputs))
    ctx.step("unloaded and reloaded before round 3", unload=["MLP"], reload=True,
             expect="unloaded")
    ctx.record("round 3", one_round(model, inputs))
    ctx.record("parameters", dict(model.named_parameters()))
