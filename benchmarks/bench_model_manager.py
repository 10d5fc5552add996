"""The model manager's costs: hook overhead per forward, offload / reload throughput.

    python -m benchmarks.bench_model_manager [hooks|disk|gpu|all] [--mib 512]

hooks  the time the agent's forward pre-hooks (on the root and on each
       composite direct part: last-used time) add to one forward call: a
       Linear(8, 8), and a model of 8 blocks held directly (root + 8 parts),
       median over interleaved rounds of many calls, model with the hooks vs
       the same model without.  Target <= 5 us.
disk   a ~512 MiB CPU model unloaded to disk (one nameless file per storage,
       its blocks reserved, then plain writes into the page cache) and
       reloaded (memory-mapped: the first forward after it pages the file
       in), GB/s, next to this machine's page-cache read speed (a file of the
       same size read twice, the second read timed).
gpu    (skipped without CUDA) a ~512 MiB CUDA model offloaded to pinned host
       memory and reloaded, GB/s, each as a ratio of a plain pinned copy of
       the same bytes that way.  The offload's timed move is its copy (the
       page-locked buffers are made before the model is held, the cache is
       emptied after); the reload's is the whole reload.  Target >= 80 % each.

``--json`` also prints the disk and gpu figures as one JSON line.

Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

from app.agent.manager import RETIRE_S

MiB = 1 << 20


def _env(torch):
    from app.agent import manager, models

    tracker = models.ModelTracker()
    tracker.hooks = True
    mgr = manager.Manager(tracker)

    def track(m):
        # what start() does for a model built before it: hooks placed on this thread
        tracker.use_torch(torch)
        tracker.placement.attach_existing(list(m.modules()))
        tracker.refresh(torch)
        return tracker.model_id(m)

    return tracker, mgr, track


def _unload(mgr, params: dict) -> dict:
    """An unload as a client makes it: ``busy`` (the model was moved for its
    share of the last seconds) waits as the answer says, then asks again."""
    from app.agent import churn
    from app.agent.errors import ActionError

    while True:
        try:
            return mgr.handle_unload(params)
        except ActionError as exc:
            if exc.code != "busy":
                raise
            time.sleep(churn.WINDOW_S / 4)


def _frozen(m):
    m.eval()
    for p in m.parameters():
        p.requires_grad_(False)
    return m


def _overhead(torch, plain, hooked, x, n=2000, rounds=60):
    def block(m):
        t = time.perf_counter()
        for _ in range(n):
            m(x)
        return (time.perf_counter() - t) / n

    a, b = [], []
    with torch.no_grad():
        for _ in range(5):
            block(plain), block(hooked)
        for _ in range(rounds):
            a.append(block(plain))
            b.append(block(hooked))
    return statistics.median(a), statistics.median(b)


def bench_hooks(torch) -> None:
    from torch import nn

    torch.set_num_threads(1)
    tracker, mgr, track = _env(torch)
    x = torch.randn(1, 8)
    plain, hooked = _frozen(nn.Linear(8, 8)), _frozen(nn.Linear(8, 8))
    track(hooked)
    assert len(hooked._forward_pre_hooks) == 1 and not hooked._forward_hooks
    base, with_hooks = _overhead(torch, plain, hooked, x)
    print("hooks: forward of Linear(8, 8): %.2f us without, %.2f us with the agent's hooks: "
          "+%.2f us per call (target <= 5 us)" % (base * 1e6, with_hooks * 1e6,
                                                  (with_hooks - base) * 1e6))

    class Blocks(nn.Module):
        def __init__(self):
            super().__init__()
            for i in range(8):
                self.add_module("b%d" % i, nn.Sequential(nn.Linear(8, 8), nn.ReLU()))

        def forward(self, t):
            for block in self.children():
                t = block(t)
            return t

    plain_blocks, hooked_blocks = _frozen(Blocks()), _frozen(Blocks())
    track(hooked_blocks)
    parts = sum(1 for m in hooked_blocks.children() if m._forward_pre_hooks)
    base, with_hooks = _overhead(torch, plain_blocks, hooked_blocks, x, n=500)
    print("hooks: forward of 8 blocks of Sequential(Linear(8, 8), ReLU), hooks on the root and "
          "its %d parts: %.2f us without, %.2f us with: +%.2f us per call (%.1f %%)"
          % (parts, base * 1e6, with_hooks * 1e6, (with_hooks - base) * 1e6,
             100 * (with_hooks - base) / base))
    _bench_hf_forward(torch, track)
    from app.agent import guard as _guard
    slot = _guard.slot_of(hooked)
    pre = _guard._PreHook(slot, lambda: False)
    n = 200000
    t = time.perf_counter()
    for _ in range(n):
        pre(hooked, ())
    print("hooks: the hook body alone: %.2f us per call (the rest is torch's hook "
          "dispatch in Module._call_impl)" % ((time.perf_counter() - t) / n * 1e6))


def _bench_hf_forward(torch, track) -> None:
    """A transformers GPT-2 (4 layers, 256 wide) forward of 32 tokens: the
    share of a real model's forward the hooks take (root + its one composite
    part, ``transformer``)."""
    try:
        import transformers
    except ImportError:
        print("hooks: GPT-2 forward skipped (transformers not installed)")
        return
    cfg = transformers.GPT2Config(n_layer=4, n_embd=256, n_head=4, vocab_size=1000,
                                  n_positions=64, bos_token_id=0, eos_token_id=0)

    def gpt2():
        torch.manual_seed(0)
        return transformers.GPT2LMHeadModel(cfg).eval()

    plain, hooked = gpt2(), gpt2()
    track(hooked)
    hooks = sum(1 for m in hooked.modules() if m._forward_pre_hooks)
    ids = torch.randint(0, 1000, (1, 32))
    base, with_hooks = _overhead(torch, plain, hooked, ids, n=20)
    print("hooks: GPT-2 (4 x 256) forward of 32 tokens, %d hooks: %.1f us without, %.1f us "
          "with: %+.1f us per call (%+.2f %%)" % (hooks, base * 1e6, with_hooks * 1e6,
                                                 (with_hooks - base) * 1e6,
                                                 100 * (with_hooks - base) / base))


def _page_cache_read(nbytes: int) -> float:
    fd, path = tempfile.mkstemp(prefix="vs-bench-")
    try:
        chunk = os.urandom(MiB) * 8
        left = nbytes
        while left > 0:
            left -= os.write(fd, chunk[:min(left, len(chunk))])
        os.fsync(fd)
        os.close(fd)
        buf = bytearray(64 * MiB)
        best = None
        for _ in range(2):  # the second read comes from the page cache
            with open(path, "rb", buffering=0) as f:
                t = time.perf_counter()
                while f.readinto(buf):
                    pass
                best = time.perf_counter() - t
        return nbytes / best / 1e9
    finally:
        os.unlink(path)


def bench_disk(torch, mib: int) -> dict:
    from torch import nn

    tmp = tempfile.mkdtemp(prefix="vs-bench-cache-")
    os.environ["XDG_CACHE_HOME"] = tmp
    tracker, mgr, track = _env(torch)
    layers = max(1, mib // 16)
    model = _frozen(nn.Sequential(*[nn.Linear(2048, 2048, bias=False) for _ in range(layers)]))
    mid = track(model)
    x = torch.randn(1, 2048)
    model(x)
    nbytes = sum(p.numel() * p.element_size() for p in model.parameters())
    print("disk: model of %d MiB (%d x Linear(2048, 2048))" % (nbytes // MiB, layers))
    cache_gbs = _page_cache_read(nbytes)
    runs = []
    for i in range(3):
        ev = _unload(mgr, {"model": mid, "to": "disk"})
        t = time.perf_counter()
        rel = mgr.handle_reload({"model": mid})
        t_reload = time.perf_counter() - t
        t = time.perf_counter()
        model(x)  # pages the memory-mapped weights in
        t_first = time.perf_counter() - t
        write = ev["copy_seconds"]
        runs.append({"unload_s": ev["seconds"], "write_s": write,
                     "write_gbs": nbytes / write / 1e9, "reload_s": t_reload,
                     "first_forward_s": t_first,
                     "reload_first_forward_gbs": nbytes / (t_reload + t_first) / 1e9})
        print("disk: run %d: unload %.3f s: written (blocks reserved, plain writes, synced where the filesystem does not reserve blocks) in %.3f s "
              "(%.2f GB/s), then the %.2f s grace before the old storages go; reload (map) "
              "%.4f s; first forward after it %.3f s -> reload+first forward %.2f GB/s"
              % (i + 1, ev["seconds"], write, nbytes / write / 1e9, RETIRE_S, t_reload,
                 t_first, nbytes / (t_reload + t_first) / 1e9))
        assert rel["ok"]
    print("disk: page-cache read of the same %d MiB (second read): %.2f GB/s"
          % (nbytes // MiB, cache_gbs))
    return {"bytes": nbytes, "runs": runs, "page_cache_read_gbs": cache_gbs}


def _plain_copies(torch, nbytes: int) -> tuple[float, float]:
    """A plain pinned copy of ``nbytes`` each way (GB/s), buffers made beforehand."""
    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda:0")
    host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    for _ in range(2):
        host.copy_(src, non_blocking=True)
        torch.cuda.synchronize()
    t = time.perf_counter()
    host.copy_(src, non_blocking=True)
    torch.cuda.synchronize()
    d2h = nbytes / (time.perf_counter() - t) / 1e9
    t = time.perf_counter()
    src.copy_(host, non_blocking=True)
    torch.cuda.synchronize()
    h2d = nbytes / (time.perf_counter() - t) / 1e9
    del src, host
    torch.cuda.empty_cache()
    return d2h, h2d


def bench_gpu(torch, mib: int) -> dict | None:
    if not torch.cuda.is_available():
        print("gpu: skipped (no CUDA)")
        return None
    from torch import nn

    tracker, mgr, track = _env(torch)
    layers = max(1, mib // 16)
    model = _frozen(nn.Sequential(*[nn.Linear(2048, 2048, bias=False) for _ in range(layers)])
                    ).to("cuda:0")
    mid = track(model)
    x = torch.randn(1, 2048, device="cuda:0")
    model(x)
    torch.cuda.synchronize()
    nbytes = sum(p.numel() * p.element_size() for p in model.parameters())
    d2h, h2d = _plain_copies(torch, nbytes)
    runs = []
    for i in range(3):
        ev = _unload(mgr, {"model": mid, "to": "cpu"})
        rel = mgr.handle_reload({"model": mid})
        # The timed move is the copy: the page-locked buffers are made before the
        # model is held, the cache is emptied after it.
        off, on = nbytes / ev["copy_seconds"] / 1e9, nbytes / rel["seconds"] / 1e9
        runs.append({"offload_gbs": off, "offload_ratio": off / d2h, "reload_gbs": on,
                     "reload_ratio": on / h2d, "unload_s": ev["seconds"],
                     "copy_s": ev["copy_seconds"], "released": ev["bytes_released"]})
        print("gpu: run %d: offload %.2f GB/s = %.0f %% of a plain pinned D2H copy (%.2f GB/s) "
              "(target >= 80 %%); reload %.2f GB/s = %.0f %% of plain H2D (%.2f GB/s) (target "
              ">= 80 %%); the whole unload %.3f s (page-locked buffers made first, the %.2f s "
              "grace, empty_cache); released %s MiB"
              % (i + 1, off, 100 * off / d2h, d2h, on, 100 * on / h2d, h2d, ev["seconds"],
                 RETIRE_S, (ev["bytes_released"] or 0) // MiB))
    return {"bytes": nbytes, "plain_d2h_gbs": d2h, "plain_h2d_gbs": h2d, "runs": runs}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("what", nargs="?", default="all", choices=["hooks", "disk", "gpu", "all"])
    ap.add_argument("--mib", type=int, default=512)
    ap.add_argument("--json", action="store_true", help="also print the figures as one JSON line")
    args = ap.parse_args(argv)
    import torch

    figures: dict = {}
    if args.what in ("hooks", "all"):
        bench_hooks(torch)
    if args.what in ("disk", "all"):
        figures["disk"] = bench_disk(torch, args.mib)
    if args.what in ("gpu", "all"):
        figures["gpu"] = bench_gpu(torch, args.mib)
    if args.json:
        print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
