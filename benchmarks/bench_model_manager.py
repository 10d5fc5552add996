"""The model manager's costs: hook overhead per forward, offload / reload throughput.

    python -m benchmarks.bench_model_manager [hooks|disk|gpu|all] [--mib 512]

hooks  the time the agent's forward pre-hooks (on the root and on each
       composite direct part: last-used time) add to one forward call: a
       Linear(8, 8), and a model of 8 blocks held directly (root + 8 parts),
       median over interleaved rounds of many calls, model with the hooks vs
       the same model without.  Target <= 5 us.
disk   a ~512 MiB CPU model unloaded to disk (one file per storage, written through the page cache) and reloaded
       (memory-mapped: the first forward after it pages the file in), GB/s,
       next to this machine's page-cache read speed (a file of the same size
       read twice, the second read timed).
gpu    (skipped without CUDA) a ~512 MiB CUDA model offloaded to pinned host
       memory and reloaded, GB/s, next to a plain pinned-memory copy of the
       same bytes each way.  Target >= 80 % of the plain copy.

Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
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


def bench_disk(torch, mib: int) -> None:
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
    for i in range(3):
        ev = mgr.handle_unload({"model": mid, "to": "disk"})
        t = time.perf_counter()
        rel = mgr.handle_reload({"model": mid})
        t_reload = time.perf_counter() - t
        t = time.perf_counter()
        model(x)  # pages the memory-mapped weights in
        t_first = time.perf_counter() - t
        move = ev["seconds"] - RETIRE_S
        print("disk: run %d: unload %.3f s = move %.3f s (%.2f GB/s) + %.2f s grace before the "
              "old storages go; reload (map) %.4f s; first forward after it %.3f s -> "
              "reload+first forward %.2f GB/s"
              % (i + 1, ev["seconds"], move, nbytes / move / 1e9, RETIRE_S, t_reload, t_first,
                 nbytes / (t_reload + t_first) / 1e9))
        assert rel["ok"]
    print("disk: page-cache read of the same %d MiB (second read): %.2f GB/s"
          % (nbytes // MiB, cache_gbs))


def bench_gpu(torch, mib: int) -> None:
    if not torch.cuda.is_available():
        print("gpu: skipped (no CUDA)")
        return
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
    for i in range(3):
        ev = mgr.handle_unload({"model": mid, "to": "cpu"})
        rel = mgr.handle_reload({"model": mid})
        move = ev["seconds"] - RETIRE_S  # the grace is a fixed wait, not the copy
        off, on = nbytes / move / 1e9, nbytes / rel["seconds"] / 1e9
        print("gpu: run %d: offload %.2f GB/s (%.0f %% of plain pinned D2H %.2f GB/s, incl. "
              "pinned allocation + empty_cache; unload %.3f s incl. the %.2f s grace), reload "
              "%.2f GB/s (%.0f %% of plain H2D %.2f GB/s); released %s MiB"
              % (i + 1, off, 100 * off / d2h, d2h, ev["seconds"], RETIRE_S, on, 100 * on / h2d,
                 h2d, (ev["bytes_released"] or 0) // MiB))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("what", nargs="?", default="all", choices=["hooks", "disk", "gpu", "all"])
    ap.add_argument("--mib", type=int, default=512)
    args = ap.parse_args(argv)
    import torch

    if args.what in ("hooks", "all"):
        bench_hooks(torch)
    if args.what in ("disk", "all"):
        bench_disk(torch, args.mib)
    if args.what in ("gpu", "all"):
        bench_gpu(torch, args.mib)
    return 0


if __name__ == "__main__":
    sys.exit(main())
