"""``serve`` on the real path: what a headless server costs and sends.

``python -m app serve --listen 127.0.0.1:0 --period 0.25 --no-history`` runs as a
child process against the ABI fake of libnvidia-ml (tests/fakes/nvml_abi) through
the real pynvml, with 8 GPUs x 64 real helper processes (``sleep``: psutil and
/proc see them).  Measured from outside, as a client would:

* server CPU with no client (its process's CPU time over the window, as % of one
  core; target <= 2 %);
* ``/metrics`` latency (Prometheus' own Accept header, one kept-alive connection,
  a 0.25 s gap between scrapes): median and p95 (target <= 50 ms);
* wire bytes per second of one client of ``GET /api/v1/stream``: the bytes
  received on the socket after the first (full) frame, with
  ``Accept-Encoding: deflate`` as ``app/core/remote/http_transport.py`` asks, and
  without; the full snapshot's size (target < 50 KB/s per client, deflated);
* server CPU with that one stream client.

Two fakes: ``static`` (the figures the fake reports never change: every delta is
the tick's time and cost) and ``churn`` (every GPU's used memory, utilisation,
temperature and power and every process's memory and SM % change every tick: an
upper bound for NVML's side).  For ``churn`` a ``sitecustomize`` put first on the
server's ``PYTHONPATH`` switches the fake to the next of 40 prepared configs and
calls ``fakeNvmlReload()`` before each ``Collector.collect()``, on the sampler
thread; that reload's own cost is measured here and printed.  The helpers' CPU %
and RSS stay constant; on a busy host they change too, so the stream's figure
with them changing every tick as well is also modelled (the snapshots the plain
stream carried, those fields changed, diffed and deflated as the server does).

    python -m benchmarks.bench_serve [--gpus 8] [--processes 64] [--seconds 20]
                                     [--scrapes 50] [--fakes static,churn] [--json FILE]
    python -m benchmarks.bench_serve --real      # the machine's own driver and agents

Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import copy
import ctypes
import http.client
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.fakes import nvml_abi  # noqa: E402
from tests.fakes.processes import end  # noqa: E402

PERIOD_S = 0.25
VARIANTS = 40  # churn configs, cycled
#: What Prometheus 2.x sends (it prefers OpenMetrics).
PROMETHEUS_ACCEPT = ("application/openmetrics-text;version=1.0.0,application/openmetrics-text;"
                     "version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1")

#: The churn hook: before each tick, on the sampler thread, the next config.
HOOK = textwrap.dedent("""
    import ctypes, os
    _files = os.environ["BENCH_SERVE_CONFIGS"].split(os.pathsep)
    _lib = ctypes.CDLL("libnvidia-ml.so.1")
    _n = [0]
    import app.core.monitor.collector as _collector
    _collect = _collector.Collector.collect

    def _churned(self):
        _n[0] += 1
        os.environ["FAKE_NVML_CONFIG"] = _files[_n[0] % len(_files)]
        _lib.fakeNvmlReload()
        return _collect(self)

    _collector.Collector.collect = _churned
""")


# ----------------------------------------------------------------- the fakes

def churned(base: nvml_abi.FakeNvml, rng: random.Random) -> nvml_abi.FakeNvml:
    """``base`` with every figure a tick can change changed."""
    fake = copy.deepcopy(base)
    for p in fake.processes:
        p.memory = max(1 << 20, (p.memory or 0) + rng.randint(-64, 64) * 1024 * 1024
                       + rng.randint(1, 4095))
        p.sm = rng.randint(0, 100)
    for index, g in enumerate(fake.gpus):
        held = sum(p.memory or 0 for p in fake.processes if p.gpu == index)
        g.used = min(g.total - g.reserved, held + rng.randint(1, 700) * 1024 * 1024)
        g.util_gpu, g.util_mem = rng.randint(1, 99), rng.randint(1, 99)
        g.temp, g.power_mw = rng.randint(30, 85), rng.randint(60_000, 690_000)
    return fake


def reload_cost_us(lib_dir: Path, config: Path, rounds: int = 200) -> float:
    """Median µs of one ``fakeNvmlReload()`` of ``config`` (the churn hook's cost)."""
    os.environ["FAKE_NVML_CONFIG"] = str(config)
    lib = ctypes.CDLL(str(lib_dir / "libnvidia-ml.so.1"))
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        lib.fakeNvmlReload()
        times.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(times)


# ---------------------------------------------------------------- the server

class Server:
    def __init__(self, proc: subprocess.Popen, url: str) -> None:
        self.proc = proc
        self.ps = psutil.Process(proc.pid)
        host, _, port = url.removeprefix("http://").rpartition(":")
        self.host, self.port = host, int(port)

    def cpu_s(self) -> float:
        t = self.ps.cpu_times()
        return t.user + t.system


@contextmanager
def running_server(env: dict[str, str], tmp: Path) -> Iterator[Server]:
    log = open(tmp / "serve.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen([sys.executable, "-m", "app", "serve", "--listen", "127.0.0.1:0",
                             "--period", str(PERIOD_S), "--no-history"],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=log,
                            stdin=subprocess.DEVNULL)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().decode()
        if not line.startswith("listening on "):
            proc.wait(timeout=10)
            raise SystemExit(f"serve did not start: {(tmp / 'serve.log').read_text()[-2000:]}")
        yield Server(proc, line.split()[-1])
    finally:
        end(proc, wait_s=20.0)
        log.close()


def cpu_percent(server: Server, seconds: float) -> float:
    t0, c0 = time.monotonic(), server.cpu_s()
    time.sleep(seconds)
    return (server.cpu_s() - c0) / (time.monotonic() - t0) * 100


def scrape_metrics(server: Server, scrapes: int, save: str | None = None) -> dict[str, Any]:
    conn = http.client.HTTPConnection(server.host, server.port, timeout=10)
    times, ticks, size, series = [], [], 0, 0
    c0, t0 = server.cpu_s(), time.monotonic()
    for _ in range(scrapes):
        start = time.perf_counter()
        conn.request("GET", "/metrics", headers={"Accept": PROMETHEUS_ACCEPT})
        resp = conn.getresponse()
        body = resp.read()
        times.append((time.perf_counter() - start) * 1e3)
        if resp.status != 200:
            raise SystemExit(f"/metrics answered {resp.status}: {body[:300]!r}")
        size = len(body)
        for ln in body.splitlines():
            if ln.startswith(b"vram_steward_collector_tick_duration_seconds "):
                ticks.append(float(ln.split()[1]) * 1e3)
        series = sum(1 for ln in body.splitlines() if ln and not ln.startswith(b"#"))
        time.sleep(PERIOD_S)
    cpu = (server.cpu_s() - c0) / (time.monotonic() - t0) * 100
    conn.close()
    if save:
        Path(save).write_bytes(body)
    times.sort()
    return {"scrapes": scrapes, "median_ms": round(statistics.median(times), 2),
            "p95_ms": round(times[max(0, int(round(0.95 * len(times))) - 1)], 2),
            "max_ms": round(times[-1], 2), "body_bytes": size, "series": series,
            "tick_wall_ms_median": round(statistics.median(ticks), 1) if ticks else None,
            "server_cpu_percent_while_scraped": round(cpu, 2)}


def snapshot_size(server: Server) -> dict[str, int]:
    conn = http.client.HTTPConnection(server.host, server.port, timeout=10)
    conn.request("GET", "/api/v1/snapshot")
    body = conn.getresponse().read()
    conn.close()
    return {"snapshot_json_bytes": len(body),
            "snapshot_deflated_bytes": len(zlib.compress(body, 6))}


def stream(server: Server, seconds: float, deflate: bool) -> dict[str, Any]:
    """One stream client for ``seconds`` after its first frame: bytes on the
    socket, frames by type, and the server's CPU meanwhile."""
    sock = socket.create_connection((server.host, server.port), timeout=30)
    extra = "Accept-Encoding: deflate\r\n" if deflate else ""
    sock.sendall((f"GET /api/v1/stream HTTP/1.1\r\nHost: {server.host}:{server.port}\r\n"
                  f"X-VRAM-Steward-Wire: 1\r\n{extra}\r\n").encode())
    raw = b""
    while b"\r\n\r\n" not in raw:
        chunk = sock.recv(65536)
        if not chunk:
            raise SystemExit("the stream closed before its headers")
        raw += chunk
    head, _, body = raw.partition(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200"):
        raise SystemExit(f"the stream answered {head[:200]!r}")
    if deflate and b"content-encoding: deflate" not in head.lower():
        raise SystemExit("asked for deflate, got none")
    inflate = zlib.decompressobj(-15) if deflate else None
    text = inflate.decompress(body) if inflate else body
    first_raw = len(body)
    while b"\n" not in text:  # the first frame: the whole snapshot
        chunk = sock.recv(65536)
        first_raw += len(chunk)
        text += inflate.decompress(chunk) if inflate else chunk
    first_frame, _, rest_text = text.partition(b"\n")
    chunks: list[bytes] = []
    c0, t0 = server.cpu_s(), time.monotonic()
    end = t0 + seconds
    while (left := end - time.monotonic()) > 0:
        sock.settimeout(left)
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            break
        if not chunk:
            raise SystemExit("the server closed the stream")
        chunks.append(chunk)
    elapsed = time.monotonic() - t0
    cpu = (server.cpu_s() - c0) / elapsed * 100
    sock.close()
    received = sum(len(c) for c in chunks)
    data = rest_text + b"".join(inflate.decompress(c) for c in chunks) if inflate \
        else rest_text + b"".join(chunks)
    kinds: dict[str, int] = {}
    frame_bytes: list[int] = []
    seq, gaps = json.loads(first_frame)["seq"], 0
    for ln in data.split(b"\n")[:-1]:
        frame = json.loads(ln)
        kind = frame.get("type", "?")
        kinds[kind] = kinds.get(kind, 0) + 1
        frame_bytes.append(len(ln) + 1)
        if kind == "delta":
            gaps += frame["seq"] != seq + 1
            seq = frame["seq"]
    return {"deflate": deflate, "seconds": round(elapsed, 1),
            "bytes_per_s": round(received / elapsed),
            "first_frame_bytes_on_wire": first_raw,
            "first_frame_json_bytes": len(first_frame) + 1,
            "frames": kinds, "delta_seq_gaps": gaps,
            "median_frame_json_bytes": statistics.median(frame_bytes) if frame_bytes else 0,
            "server_cpu_percent": round(cpu, 2),
            "_lines": [first_frame, *data.split(b"\n")[:-1]]}


def modelled_host_churn(lines: list[bytes], seed: int = 3) -> dict[str, Any]:
    """Bytes the stream would carry if every process's CPU % and RSS changed
    each tick as well (idle helpers keep them constant): the snapshots the
    stream carried (its full frame, then its patches applied), each with those
    fields changed, encoded as the server does (diff, one JSON line, one deflate
    stream flushed per frame)."""
    from app.core.serve.frames import line
    from app.core.wire.delta import apply, diff

    rng = random.Random(seed)
    frames = [json.loads(ln) for ln in lines]
    current = frames[0]["snapshot"]
    snapshots = [current]
    for frame in frames[1:]:
        if frame.get("type") == "delta":
            current = apply(current, frame["patch"])
            snapshots.append(current)
    zipper = zlib.compressobj(6, zlib.DEFLATED, -15)
    raw = packed = 0
    old = None
    for seq, snapshot in enumerate(snapshots):
        new = copy.deepcopy(snapshot)
        for gpu in new["gpus"]:
            for p in gpu["processes"]:
                p["cpu_percent"] = round(rng.uniform(0, 400), 1)
                p["host_rss"] = (p.get("host_rss") or 0) + rng.randint(0, 1 << 26)
        if old is not None:
            data = line({"type": "delta", "seq": seq, "patch": diff(old, new)})
            raw += len(data)
            packed += len(zipper.compress(data) + zipper.flush(zlib.Z_SYNC_FLUSH))
        old = new
    ticks = max(1, len(snapshots) - 1)
    return {"ticks": ticks, "json_bytes_per_s": round(raw / ticks / PERIOD_S),
            "deflated_bytes_per_s": round(packed / ticks / PERIOD_S)}


# -------------------------------------------------------------------- a run

def measure(fake_name: str, base: nvml_abi.FakeNvml | None, lib: Path | None,
            args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="vsb-serve-") as tmp_name:
        tmp = Path(tmp_name)
        for name in ("state", "run"):
            (tmp / name).mkdir(mode=0o700)
        if base is None or lib is None:  # the machine's driver; its agents where the caller says
            env = dict(os.environ)
            env.setdefault("VRAM_STEWARD_RUNTIME_DIR", str(tmp / "run"))
        else:
            env = base.env(lib, base.write(tmp / "nvml.conf"))
            env["VRAM_STEWARD_RUNTIME_DIR"] = str(tmp / "run")
        env.update(PYTHONPATH=str(REPO), VRAM_STEWARD_STATE_DIR=str(tmp / "state"))
        result: dict[str, Any] = {"fake": fake_name}
        if fake_name == "churn":
            rng = random.Random(5)
            files = [str(churned(base, rng).write(tmp / f"nvml-{k}.conf")) for k in range(VARIANTS)]
            (tmp / "hook").mkdir()
            (tmp / "hook" / "sitecustomize.py").write_text(HOOK)
            env.update(PYTHONPATH=os.pathsep.join([str(tmp / "hook"), str(REPO)]),
                       BENCH_SERVE_CONFIGS=os.pathsep.join(files))
            cost = reload_cost_us(lib, Path(files[0]))
            result["reload_hook_us_per_tick"] = round(cost, 1)
            result["reload_hook_percent_of_one_core"] = round(cost / 1e6 / PERIOD_S * 100, 3)
        with running_server(env, tmp) as server:
            time.sleep(args.warmup)
            result["idle_cpu_percent"] = round(cpu_percent(server, args.seconds), 2)
            if fake_name in ("static", "real"):
                result["metrics"] = scrape_metrics(server, args.scrapes, args.save_metrics)
            result |= snapshot_size(server)
            result["stream_deflate"] = stream(server, args.seconds, deflate=True)
            result["stream_plain"] = stream(server, args.seconds, deflate=False)
        lines = result["stream_plain"].pop("_lines")
        result["stream_deflate"].pop("_lines")
        if fake_name == "churn" and len(lines) > 1:
            result["stream_host_churn_modelled"] = modelled_host_churn(lines)
    return result


def report(r: dict[str, Any], gpus: int, per_gpu: int) -> None:
    kb = 1000.0
    scenario = "the machine's driver" if r["fake"] == "real" else \
        f"{r['fake']} fake, {gpus} GPUs x {per_gpu} processes"
    print(f"\n{scenario}, period {PERIOD_S} s")
    if "reload_hook_us_per_tick" in r:
        print(f"  (churn hook: one fakeNvmlReload() {r['reload_hook_us_per_tick']} µs per tick, "
              f"{r['reload_hook_percent_of_one_core']} % of one core, inside the figures below)")
    print(f"  server CPU, no client:          {r['idle_cpu_percent']:6.2f} % of one core"
          "   (target <= 2 %)")
    m = r.get("metrics")
    if m:
        print(f"  /metrics, {m['scrapes']} scrapes:            median {m['median_ms']:.1f} ms, "
              f"p95 {m['p95_ms']:.1f} ms, max {m['max_ms']:.1f} ms   (target <= 50 ms); "
              f"{m['series']} series, {m['body_bytes'] / kb:.0f} KB; server CPU while scraped "
              f"every {PERIOD_S} s: {m['server_cpu_percent_while_scraped']:.2f} %")
        print(f"  sampler tick (the server's vram_steward_collector_tick_duration_seconds): "
              f"median {m['tick_wall_ms_median']} ms wall")
    print(f"  full snapshot:                  {r['snapshot_json_bytes'] / kb:.1f} KB JSON, "
          f"{r['snapshot_deflated_bytes'] / kb:.1f} KB deflated")
    for key, label in (("stream_deflate", "deflate"), ("stream_plain", "plain  ")):
        s = r[key]
        frames = ", ".join(f"{n} {k}" for k, n in sorted(s["frames"].items()))
        target = "   (target < 50 KB/s)" if s["deflate"] else ""
        print(f"  stream, one client, {label}:    {s['bytes_per_s'] / kb:6.2f} KB/s on the wire"
              f"{target}; first frame {s['first_frame_bytes_on_wire'] / kb:.1f} KB; {frames} "
              f"in {s['seconds']} s, median frame {s['median_frame_json_bytes'] / kb:.2f} KB JSON; "
              f"server CPU {s['server_cpu_percent']:.2f} %")
    h = r.get("stream_host_churn_modelled")
    if h:
        print(f"  modelled, the same + every process's CPU % and RSS changing each tick: "
              f"{h['deflated_bytes_per_s'] / kb:.2f} KB/s deflated, "
              f"{h['json_bytes_per_s'] / kb:.1f} KB/s plain")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--processes", type=int, default=64, help="per GPU")
    parser.add_argument("--seconds", type=float, default=20.0, help="each CPU and stream window")
    parser.add_argument("--warmup", type=float, default=10.0, help="seconds after start")
    parser.add_argument("--scrapes", type=int, default=50)
    parser.add_argument("--fakes", default="static,churn", help="static, churn or both")
    parser.add_argument("--real", action="store_true",
                        help="the machine's driver, no fake (agents: $VRAM_STEWARD_RUNTIME_DIR)")
    parser.add_argument("--save-metrics", metavar="PATH", help="write the last /metrics body there")
    parser.add_argument("--json", metavar="PATH", help="also write the figures as one JSON object")
    args = parser.parse_args()

    result: dict[str, Any]
    if args.real:
        result = {"machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]},
                  "runs": [measure("real", None, None, args)]}
        report(result["runs"][0], 0, 0)
        if args.json:
            Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
        return 0
    reason = nvml_abi.unavailable_reason()
    if reason:
        print(f"skipped: {reason}")
        return 0
    lib = nvml_abi.build("current")
    result = {
        "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0],
                    "root": hasattr(os, "getuid") and os.getuid() == 0},
        "scenario": {"gpus": args.gpus, "processes_per_gpu": args.processes,
                     "period_s": PERIOD_S, "seconds": args.seconds},
        "runs": []}
    with nvml_abi.Helpers(args.gpus * args.processes) as pids:
        base = nvml_abi.server(list(nvml_abi.chunks(pids, args.processes)), seed=12)
        for name in args.fakes.split(","):
            run = measure(name.strip(), base, lib, args)
            result["runs"].append(run)
            report(run, args.gpus, args.processes)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
