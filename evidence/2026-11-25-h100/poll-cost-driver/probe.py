"""Device probe (issue 28, third session): utilization-read equality, per-thread CPU, nvitop alone."""

import contextlib
import http.client
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path


def load(kind):
    code = r"""
import sys, time, torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16); b = torch.randn_like(a)
on, off = (float(x) for x in sys.argv[1:3])
end = time.time() + float(sys.argv[3])
while time.time() < end:
    t = time.time()
    while time.time() - t < on:
        for _ in range(4): a @ b
        torch.cuda.synchronize()
    if off: time.sleep(off)
"""
    on, off = {"steady": (1.0, 0.0), "duty": (0.3, 0.5)}[kind]
    return subprocess.Popen([sys.executable, "-c", code, str(on), str(off), "900"])


def thread_ns(pid):
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            comm = (task / "comm").read_text().strip()
            ns = int((task / "schedstat").read_text().split()[0])
            out[f"{comm}:{task.name}"] = ns
    return out


def rss(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS"):
            return int(line.split()[1]) / 1024


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def scrape(port):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("GET", "/metrics", headers={"Accept-Encoding": "gzip"})
    r = c.getresponse()
    r.read()
    c.close()


def measure(name, argv, port, warm, seconds, env=None):
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    try:
        deadline = time.time() + 30
        while time.time() < deadline:
            with contextlib.suppress(OSError):
                scrape(port)
                break
            time.sleep(0.2)
        time.sleep(warm)
        before, t0 = thread_ns(proc.pid), time.monotonic()
        next_scrape = time.monotonic()
        while time.monotonic() - t0 < seconds:
            if time.monotonic() >= next_scrape:
                scrape(port)
                next_scrape += 15
            time.sleep(0.2)
        after, wall = thread_ns(proc.pid), time.monotonic() - t0
        total = sum(after.values()) - sum(before.get(k, 0) for k in after)
        print(f"\n## {name}: {total / wall / 1e7:.3f} % of a core over {wall:.0f} s, RSS {rss(proc.pid):.1f} MB")
        for key in sorted(after, key=lambda k: -(after[k] - before.get(k, 0))):
            d = after[key] - before.get(key, 0)
            if d:
                print(f"  {key:30s} {d / wall / 1e3:9.1f} us/s")
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        err = proc.stderr.read().decode(errors="replace")[-1500:]
        if err.strip():
            print("  stderr tail:", err.replace("\n", "\n    "))


def equality():
    import pynvml

    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    job = load("duty")
    time.sleep(4)
    t0 = int(time.time() * 1e6)
    reads = []
    end = time.time() + 6
    while time.time() < end:
        t = int(time.time() * 1e6)
        u = pynvml.nvmlDeviceGetUtilizationRates(h).gpu
        reads.append((t, u))
        time.sleep(0.01)
    _, samples = pynvml.nvmlDeviceGetSamples(h, pynvml.NVML_GPU_UTILIZATION_SAMPLES, t0)
    samples = sorted((int(s.timeStamp), int(s.sampleValue.uiVal)) for s in samples)
    match = total = 0
    for t, u in reads:
        older = [s for s in samples if s[0] <= t]
        if not older:
            continue
        total += 1
        match += older[-1][1] == u
    print(
        f"## GetUtilizationRates vs newest GetSamples sample at read time: {match}/{total} equal; {len(samples)} samples, gaps ms: {sorted(set(round((b[0] - a[0]) / 1000) for a, b in zip(samples, samples[1:])))}"
    )
    print("samples:", [(round((s[0] - t0) / 1000), s[1]) for s in samples])
    changes = [(round((t - t0) / 1000), u) for i, (t, u) in enumerate(reads) if i == 0 or reads[i - 1][1] != u]
    print("read changes (ms, value):", changes)
    # shifted match: does the read equal the newest sample dated up to X ms later (reads lag or lead)?
    for shift in (-100, -50, -20, 0, 20, 50, 100):
        m = sum(
            1
            for t, u in reads
            if [s for s in samples if s[0] <= t + shift * 1000]
            and [s for s in samples if s[0] <= t + shift * 1000][-1][1] == u
        )
        print(f"  shift {shift:+d} ms: {m}/{len(reads)}")
    times = []
    for _ in range(500):
        a = time.perf_counter()
        pynvml.nvmlDeviceGetUtilizationRates(h)
        times.append(time.perf_counter() - a)
    print(f"GetUtilizationRates median {statistics.median(times) * 1e6:.1f} us")
    job.kill()
    job.wait()
    pynvml.nvmlShutdown()


if __name__ == "__main__":
    what = sys.argv[1]
    if what == "equality":
        equality()
    elif what == "threads":
        job = load("steady")
        time.sleep(3)
        try:
            for interval, seconds in (("1", 40), ("0.1", 20)):
                port = free_port()
                measure(
                    f"this daemon at {interval} s (steady bf16 matmul)",
                    [
                        sys.executable,
                        "-m",
                        "exporter",
                        "--web.listen-address",
                        f"127.0.0.1:{port}",
                        "--collect-interval",
                        interval + "s",
                        "--log.level",
                        "warn",
                    ],
                    port,
                    12,
                    seconds,
                )
            port = free_port()
            env = dict(os.environ, PYTHONPATH="/tmp/site")
            measure(
                "nvitop-exporter 1.7.2 at 1 s (steady bf16 matmul)",
                [
                    sys.executable,
                    "-m",
                    "nvitop_exporter",
                    "--bind-address",
                    "127.0.0.1",
                    "--port",
                    str(port),
                    "--interval",
                    "1.0",
                ],
                port,
                12,
                40,
                env,
            )
        finally:
            job.kill()
            job.wait()
