"""Hogwild training as in PyTorch's docs: a model in shared memory
(``model.share_memory()``) trained by worker processes
(``torch.multiprocessing``, fork and spawn), each with its own optimizer.

Workers train in turn, one at a time, with fixed seeds and data, so the final
weights are reproducible to the bit.  Between rounds the parent's model is
unloaded (and reloaded; once with ``force``): its storages are shared with
the workers, so the unload must be refused, forced or not; then the parent's weights, its eval forward and each
worker's view of the weights are recorded (one set of weights, in every
process).
"""

import queue

import torch
import zoo
from torch.nn import functional

VARIANTS = {"fork": 0, "spawn": 0}
WORKERS = 2
ROUNDS = 3
ANSWER_TIMEOUT_S = 120


def batches(rank: int) -> list:
    g = torch.Generator().manual_seed(100 + rank)
    return [(torch.randn(8, 16, generator=g), torch.randn(8, 8, generator=g)) for _ in range(4)]


def worker(rank: int, model: torch.nn.Module, orders, answers) -> None:
    """One Hogwild worker: its own optimizer on the shared weights; trains or
    shows its view of them when the parent says so."""
    torch.manual_seed(rank)
    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    data = batches(rank)
    for order in iter(orders.get, None):
        if order == "train":
            losses = []
            for x, y in data:
                optimizer.zero_grad()
                loss = functional.mse_loss(model(x), y)
                loss.backward()
                optimizer.step()
                losses.append(loss.item())
            answers.put(losses)
        else:
            answers.put({n: t.detach().numpy().copy() for n, t in model.state_dict().items()})


def ask(orders, answers, order: str) -> list:
    """Each worker in turn does ``order``; their answers, in rank order."""
    out = []
    for q in orders:
        q.put(order)
        try:
            out.append(answers.get(timeout=ANSWER_TIMEOUT_S))
        except queue.Empty:
            raise RuntimeError(f"a worker did not answer {order!r}") from None
    return out


def record_views(ctx, label: str, model, orders, answers, x: torch.Tensor) -> None:
    """The weights as the parent and each worker see them, their sums first
    (the quickest read of a parent left behind), and the parent's forward."""
    views = ask(orders, answers, "show")
    ctx.record(f"{label}: sums (parent, workers)",
               [float(sum(t.double().sum() for t in model.state_dict().values())),
                [float(sum(a.astype("float64").sum() for a in v.values())) for v in views]])
    with torch.no_grad():
        ctx.record(f"{label}: parent's eval forward", model(x))
    ctx.record(f"{label}: parent's weights", model.state_dict())
    ctx.record(f"{label}: workers' views", views)


def run(ctx) -> None:
    mp = torch.multiprocessing.get_context(ctx.variant)
    model = zoo.mlp()
    model.share_memory()
    x = zoo.inputs(4, 16)
    orders = [mp.SimpleQueue() for _ in range(WORKERS)]
    answers = mp.Queue()
    workers = [mp.Process(target=worker, args=(rank, model, orders[rank], answers))
               for rank in range(WORKERS)]
    for w in workers:
        w.start()
    try:
        ctx.step("workers started", unload=["MLP"], reload=True, expect="refused")
        record_views(ctx, "before training", model, orders, answers, x)
        for n in range(ROUNDS):
            ctx.record(f"round {n}: losses", ask(orders, answers, "train"))
            ctx.step(f"after round {n}", unload=["MLP"], reload=True, expect="refused",
                     force=n == 1)
            record_views(ctx, f"round {n}", model, orders, answers, x)
    finally:
        for q in orders:
            q.put(None)
        for w in workers:
            w.join(ANSWER_TIMEOUT_S)
            if w.is_alive():
                w.kill()
    ctx.record("workers' exit codes", [w.exitcode for w in workers])
