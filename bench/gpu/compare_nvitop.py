#!/usr/bin/env python3
"""Overhead on a real GPU beside nvitop-exporter, as issue 28 measures it (about 7 minutes by default):

1. floor: every NVML call of the backend's polls, recorded where ``NvmlBackend.collect`` makes it
   (bench/nvml_calls.py: the list comes from the backend itself), with its cadence and its wall and
   thread-CPU time, and the whole collect per poll; ``--floor-polls`` polls 1 s apart;
2. overhead: this tree's daemon, ``--baseline TREE``'s daemon and nvitop-exporter at a 1 s interval,
   and the two trees' daemons at 100 ms, each measured ALONE: all are started and warmed up together
   (``--warmup`` seconds, scraped every ``--scrape-every`` s so each daemon learns the scrapes'
   cadence), then all but one are stopped (SIGSTOP: they poll nothing and spend nothing) and each
   runs alone in turn for ``--seconds`` (1 s) or ``--fast-seconds`` (100 ms), in ``--rounds``
   interleaved rounds (A B C A B C), scraped with gzip every ``--scrape-every`` s as Prometheus
   would. CPU: every thread's ``/proc/PID/task/TID/schedstat`` (ns; sampled every 0.5 s, so a thread
   that lives less than that is missed) and ``/proc/PID/stat`` (10 ms ticks, exited threads
   included); memory: VmRSS, RssAnon and RssFile at the end of each window. Medians over rounds, and
   each thread's share by TID in creation order with its kernel name;
3. perturbation (not in the default): a bf16 matmul's own TFLOP/s with no exporter, with this daemon
   at 1 s and at 100 ms, in interleaved rounds.

``--load matmul`` (the default) keeps a steady bf16 matmul running in a child process (PyTorch, else
CuPy) during parts 1 and 2; ``--load none`` measures an idle GPU. nvitop-exporter is run as
``--nvitop-cmd`` (e.g. ``"env PYTHONPATH=/tmp/site python3 -m nvitop_exporter"``), else the
``nvitop-exporter`` program on PATH, else ``python -m nvitop_exporter`` where importable; it is skipped
with a line saying so where none is found. ``--fake-gpus N`` runs everything on the fake pynvml
(tests/support/fakes/nvml.py; the daemons through each tree's tools/fake_nvml_daemon.py) to check the bench
on a machine without a GPU: no load, no nvitop-exporter. Prints Markdown tables.

    python bench/gpu/compare_nvitop.py [--baseline TREE] [--parts floor,overhead] [--rounds 2] [--nvitop-cmd CMD]
    python bench/gpu/compare_nvitop.py --fake-gpus 1 --baseline TREE --seconds 6 --fast-seconds 4 --warmup 7 --scrape-every 2
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import http.client
import importlib.util
import os
import platform
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: the shared harness
from harness import free_port, memory_kib, process_cpu_seconds, thread_cpu_ns  # noqa: E402 (bench/ is first on sys.path when a benchmark runs)

from gpueff.commands.selftest.workloads import SelftestUnavailable  # noqa: E402

LOAD_CODE = r"""
import sys, time
gpu, seconds = int(sys.argv[1]), float(sys.argv[2])
try:
    import torch
    torch.cuda.set_device(gpu)
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16); b = torch.randn_like(a)
    sync, engine = torch.cuda.synchronize, "PyTorch " + torch.__version__
except ImportError:
    import cupy
    cupy.cuda.Device(gpu).use()
    a = cupy.random.rand(8192, 8192, dtype=cupy.float32).astype(cupy.float16); b = a.copy()  # CuPy has no bf16
    sync, engine = cupy.cuda.Device(gpu).synchronize, "CuPy " + cupy.__version__ + " (fp16)"
a @ b; sync()
print(engine, flush=True)
end = time.monotonic() + seconds
while time.monotonic() < end:
    for _ in range(4):
        a @ b
    sync()
"""


class BenchError(Exception):
    """The benchmark cannot run here; the message says why."""


# ---- processes and scrapes ---------------------------------------------------------------------


def scrape(port: int, gzipped: bool = True) -> bytes:
    """One GET /metrics on a fresh connection, as Prometheus asks (gzip); the body, decoded."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request("GET", "/metrics", headers={"Accept-Encoding": "gzip"} if gzipped else {})
        response = connection.getresponse()
        body = response.read()
    finally:
        connection.close()
    if response.status != 200:
        raise OSError(f"GET /metrics answered {response.status}")
    return gzip.decompress(body) if response.getheader("Content-Encoding") == "gzip" else body


@dataclass(frozen=True)
class Window:
    """What one exporter spent alone in one round."""

    cpu_pct: float  # % of a core, all threads' schedstat
    cpu_pct_stat: float  # % of a core, /proc/PID/stat ticks (exited threads included)
    rss_mb: float
    anon_mb: float
    file_mb: float
    threads: dict[int, tuple[str, float]]  # TID -> (comm, µs of CPU per second)


@dataclass
class Subject:
    """One exporter process measured alone: what it is, how it runs, what was measured."""

    label: str
    interval: str
    command: list[str]
    cwd: Path
    port: int = 0
    process: subprocess.Popen[bytes] | None = None
    stderr: IO[bytes] | None = None
    rounds: list[Window] = field(default_factory=list)
    next_scrape: float = 0.0
    failed_scrapes: int = 0
    left_out: str = ""  # why its later rounds were not measured

    def scrape(self) -> None:
        """A Prometheus scrape; one that fails is counted (and reported), not fatal."""
        try:
            scrape(self.port)
        except (OSError, http.client.HTTPException):
            self.failed_scrapes += 1

    def start(self) -> None:
        self.stderr = tempfile.TemporaryFile()  # noqa: SIM115 (closed by stop(), after the process)
        self.process = subprocess.Popen(self.command, cwd=self.cwd, stdout=subprocess.DEVNULL, stderr=self.stderr)

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def error_tail(self) -> str:
        if self.stderr is None:
            return ""
        self.stderr.seek(0)
        return self.stderr.read().decode(errors="replace").strip()[-1200:]

    def wait_ready(self, deadline: float) -> None:
        assert self.process is not None
        while True:
            if self.process.poll() is not None:
                raise BenchError(f"{self.label} exited with {self.process.returncode}: {self.error_tail()}")
            with contextlib.suppress(OSError):
                scrape(self.port)
                return
            if time.monotonic() > deadline:
                raise BenchError(f"{self.label} did not serve /metrics in time: {self.error_tail()}")
            time.sleep(0.2)

    def signal(self, number: int) -> None:
        if self.process is not None and self.process.poll() is None:
            os.kill(self.pid, number)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.signal(signal.SIGCONT)  # a stopped process acts on SIGTERM only once continued
            self.process.terminate()
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.stderr is not None:
            self.stderr.close()
            self.stderr = None


def package_of(tree: Path) -> str:
    """The tree's import package: gpueff, or exporter in trees from before the rename (2026-12-01)."""
    for name in ("gpueff", "exporter"):
        if (tree / name / "__main__.py").is_file():
            return name
    raise BenchError(f"{tree}: no gpueff/ (or, before the rename, exporter/) package there")


def daemon_command(tree: Path, port: int, interval: str, fake_gpus: int) -> list[str]:
    if fake_gpus:
        script = tree / "tools" / "fake_nvml_daemon.py"
        if not script.is_file():
            raise BenchError(f"{tree} has no tools/fake_nvml_daemon.py: --fake-gpus needs it in every tree")
        start = [sys.executable, str(script), str(fake_gpus)]
    else:
        start = [sys.executable, "-m", package_of(tree)]  # the tree in cwd comes first on the path
    return [*start, "--web.listen-address", f"127.0.0.1:{port}", "--collect-interval", interval, "--log.level", "warn"]


def nvitop_program(option: str | None) -> list[str] | None:
    """How to start nvitop-exporter: --nvitop-cmd, the program on PATH, or its module; None if none."""
    if option:
        return shlex.split(option)
    program = shutil.which("nvitop-exporter")
    if program is not None:
        return [program]
    if importlib.util.find_spec("nvitop_exporter") is not None:
        return [sys.executable, "-m", "nvitop_exporter"]
    return None


def subjects(args: argparse.Namespace) -> tuple[list[Subject], list[str]]:
    """The exporters to measure, and lines saying which were left out and why."""
    trees = [("this tree", ROOT)]
    if args.baseline:
        baseline = Path(args.baseline).resolve()
        package_of(baseline)
        trees.append(("baseline", baseline))
    chosen, skipped = [], []
    for interval in ("1s", "100ms"):
        for label, tree in trees:
            port = free_port()
            chosen.append(Subject(label, interval, daemon_command(tree, port, interval, args.fake_gpus), tree, port))
        if interval == "1s":
            nvitop = nvitop_program(args.nvitop_cmd)
            if args.fake_gpus and not args.nvitop_cmd:
                skipped.append("nvitop-exporter: not measured (fake GPUs: it reads the real driver; an explicit --nvitop-cmd is run)")
            elif nvitop is None:
                skipped.append("nvitop-exporter: not installed (no --nvitop-cmd, no nvitop-exporter on PATH, no module nvitop_exporter): skipped")
            else:
                port = free_port()
                chosen.append(Subject("nvitop-exporter", "1s", [*nvitop, "--bind-address", "127.0.0.1", "--port", str(port), "--interval", "1.0"], ROOT, port))
    return chosen, skipped


# ---- load ---------------------------------------------------------------------------------------


@contextlib.contextmanager
def load(kind: str, gpu: int, seconds: float) -> Iterator[str]:
    """A steady bf16 matmul in a child process for at most ``seconds``; yields what runs it."""
    if kind == "none":
        yield "none (idle GPU)"
        return
    errors = tempfile.TemporaryFile()  # noqa: SIM115 (closed below, after the process)
    process = subprocess.Popen([sys.executable, "-c", LOAD_CODE, str(gpu), str(seconds)], stdout=subprocess.PIPE, stderr=errors, text=True)
    try:
        assert process.stdout is not None
        engine = process.stdout.readline().strip()
        if not engine:
            process.wait(10)
            errors.seek(0)
            raise BenchError(f"--load matmul needs PyTorch or CuPy with CUDA (or pass --load none): {errors.read().decode(errors='replace').strip()[-600:]}")
        time.sleep(3)  # clocks and power settle
        yield f"steady bf16 8192x8192 matmul on GPU {gpu} ({engine}) in another process"
    finally:
        process.kill()
        process.wait()
        errors.close()


# ---- part 2: overhead ---------------------------------------------------------------------------


def measure_alone(subject: Subject, seconds: float, scrape_every: float, settle: float) -> Window:
    """Continue ``subject``, scrape it at once (its scrape is overdue), let it settle, then measure
    ``seconds`` with a gzip scrape every ``scrape_every`` s; stop it again."""
    subject.signal(signal.SIGCONT)
    try:
        started = time.monotonic()
        subject.scrape()
        subject.next_scrape = started + scrape_every
        time.sleep(max(0.0, started + settle - time.monotonic()))
        before, ticks_before, window_start = thread_cpu_ns(subject.pid), process_cpu_seconds(subject.pid), time.monotonic()
        last = dict(before)
        end = window_start + seconds
        while (now := time.monotonic()) < end:
            if now >= subject.next_scrape:
                subject.scrape()
                subject.next_scrape += scrape_every
            last.update(thread_cpu_ns(subject.pid))
            time.sleep(min(0.5, max(0.0, min(end, subject.next_scrape) - time.monotonic())))
        last.update(thread_cpu_ns(subject.pid))
        wall = time.monotonic() - window_start
        ticks = process_cpu_seconds(subject.pid) - ticks_before
        memory = memory_kib(subject.pid)
    finally:
        subject.signal(signal.SIGSTOP)
    threads = {tid: (comm, (ns - before.get(tid, ("", 0))[1]) / wall / 1e3) for tid, (comm, ns) in last.items()}  # µs of CPU per second
    return Window(sum(us for _, us in threads.values()) / 1e4, ticks / wall * 100, memory["VmRSS"] / 1024, memory["RssAnon"] / 1024, memory["RssFile"] / 1024, threads)


def overhead(chosen: list[Subject], args: argparse.Namespace) -> None:
    try:
        for subject in chosen:
            subject.start()
        deadline = time.monotonic() + 60
        ready = []
        for subject in chosen:
            try:
                subject.wait_ready(deadline)
                ready.append(subject)
            except BenchError as error:
                if subject.label == "this tree":
                    raise
                print(f"- {subject.label} at {subject.interval}: left out, {error}")
                subject.stop()
        started = time.monotonic()
        while True:  # warm-up: imports, NVML, the first polls, and the scrapes' cadence learnt
            for subject in ready:
                subject.scrape()
            if time.monotonic() - started + args.scrape_every > args.warmup:
                break
            time.sleep(max(0.0, started + args.scrape_every * (1 + round((time.monotonic() - started) / args.scrape_every)) - time.monotonic()))
        for subject in ready:
            subject.signal(signal.SIGSTOP)
        for number in range(args.rounds):
            for subject in ready:
                if subject.left_out:
                    continue
                seconds = args.seconds if subject.interval == "1s" else args.fast_seconds
                try:
                    subject.rounds.append(measure_alone(subject, seconds, args.scrape_every, args.settle))
                except (OSError, KeyError) as error:  # it exited: /proc/PID is gone or a zombie's
                    code = subject.process.poll() if subject.process is not None else None
                    why = f"it exited with {code}" if code is not None else f"{type(error).__name__}: {error}"
                    subject.left_out = f"round {number + 1}: {why}; stderr: {subject.error_tail()}"
                    print(f"  {subject.label} at {subject.interval} left out from round {number + 1}: {why}", file=sys.stderr, flush=True)
                    continue
                last = subject.rounds[-1]
                print(f"  round {number + 1}, {subject.label} at {subject.interval}: {last.cpu_pct:.3f} % of a core, RSS {last.rss_mb:.1f} MB", file=sys.stderr, flush=True)
        report_overhead([subject for subject in ready if subject.rounds], args)
        for subject in ready:
            if subject.left_out:
                print(f"- {subject.label} at {subject.interval}: left out from {subject.left_out}")
            if subject.failed_scrapes:
                print(f"- {subject.label} at {subject.interval}: {subject.failed_scrapes} scrape(s) failed")
    finally:
        for subject in chosen:
            subject.stop()


def report_overhead(ready: list[Subject], args: argparse.Namespace) -> None:
    def median(subject: Subject, key: str) -> float:
        return float(statistics.median(getattr(window, key) for window in subject.rounds))

    print(f"Each alone, {args.rounds} interleaved rounds, {args.seconds:g} s at 1 s and {args.fast_seconds:g} s at 100 ms per round, gzip scrape every {args.scrape_every:g} s; medians over rounds\n")
    print("| exporter | interval | CPU % of a core (threads' schedstat) | per round | CPU % (/proc stat, 10 ms ticks, exited threads in) | RSS MB | RssAnon MB | RssFile MB |")
    print("| --- | --- | ---: | --- | ---: | ---: | ---: | ---: |")
    for subject in ready:
        rounds = " / ".join(f"{window.cpu_pct:.3f}" for window in subject.rounds)
        print(f"| {subject.label} | {subject.interval} | {median(subject, 'cpu_pct'):.3f} | {rounds} | {median(subject, 'cpu_pct_stat'):.3f} | {median(subject, 'rss_mb'):.1f} | {median(subject, 'anon_mb'):.1f} | {median(subject, 'file_mb'):.1f} |")
    by_name = {(subject.label, subject.interval): subject for subject in ready}
    ours = by_name.get(("this tree", "1s"))
    print()
    for other, interval in (("nvitop-exporter", "1s"), ("baseline", "1s"), ("baseline", "100ms")):
        theirs, mine = by_name.get((other, interval)), by_name.get(("this tree", interval))
        if theirs is not None and mine is not None:
            print(f"- CPU at {interval}, this tree / {other}: {median(mine, 'cpu_pct') / max(median(theirs, 'cpu_pct'), 1e-9):.2f}x (schedstat), {median(mine, 'cpu_pct_stat') / max(median(theirs, 'cpu_pct_stat'), 1e-9):.2f}x (/proc stat)")
    if ours is None:
        return
    print("\nPer thread, µs of CPU per second (median over rounds), by TID in creation order (Python's thread names are not the kernel's):\n")
    print("| exporter | interval | # | TID | comm | µs/s |\n| --- | --- | ---: | ---: | --- | ---: |")
    for subject in ready:
        tids = sorted({tid for window in subject.rounds for tid in window.threads})
        for number, tid in enumerate(tids, 1):
            values = [window.threads[tid][1] for window in subject.rounds if tid in window.threads]
            comm = next(window.threads[tid][0] for window in subject.rounds if tid in window.threads)
            main_thread = " (main)" if tid == subject.pid else ""
            print(f"| {subject.label} | {subject.interval} | {number} | {tid}{main_thread} | {comm} | {statistics.median(values):.1f} |")


# ---- part 1: the NVML floor ------------------------------------------------------------------------


def fake_nvml(gpus: int) -> Any:
    sys.path.insert(0, str(ROOT / "tests" / "support"))
    from fakes.nvml import H100_CALL_COSTS, FakeNvml

    from gpueff.trace import load_trace, planted_trace_paths

    traces = [load_trace(path) for path in planted_trace_paths()]
    return FakeNvml([traces[index % len(traces)] for index in range(gpus)], call_cost=H100_CALL_COSTS, event_wait_cap=0.5)


def floor(args: argparse.Namespace) -> None:
    from nvml_calls import markdown, record

    if args.fake_gpus:
        nvml: Any = fake_nvml(args.fake_gpus)
        print("(fake pynvml: each call sleeps the H100 cost tests/support/fakes/nvml.py gives it, so wall is that, thread CPU the fake's Python)\n")
    else:
        import pynvml

        nvml = pynvml
    print(markdown(record(nvml, args.floor_interval, args.floor_polls)) + "\n")


# ---- part 3: perturbation --------------------------------------------------------------------------


def perturbation(gpu: int, seconds: float, rounds: int) -> None:
    from gpueff.backends.nvml.backend import NvmlBackend
    from gpueff.commands.selftest.workloads import load_engine, matmul  # PyTorch or CuPy, imported only here

    engine = load_engine(gpu)
    backend = NvmlBackend()
    device = backend.start()[gpu]
    backend.close()
    matmul(engine, 10.0, device)  # clocks and power settle before the first measured run
    conditions: dict[str, str | None] = {"no exporter": None, "this daemon at 1s": "1s", "this daemon at 100ms": "100ms"}
    results: dict[str, list[float]] = {name: [] for name in conditions}
    for round_number in range(rounds):
        for name, interval in conditions.items():
            subject = None
            if interval:
                port = free_port()
                subject = Subject("this tree", interval, daemon_command(ROOT, port, interval, 0), ROOT, port)
                subject.start()
            try:
                if subject:
                    subject.wait_ready(time.monotonic() + 60)
                    time.sleep(3)
                results[name].append(matmul(engine, seconds, device)["tflops"])
            finally:
                if subject:
                    subject.stop()
            print(f"  round {round_number + 1}, {name}: {results[name][-1]:.1f} TFLOP/s", file=sys.stderr)
    baseline = statistics.fmean(results["no exporter"])
    print("| condition | bf16 matmul TFLOP/s (mean) | min | max | change |\n| --- | ---: | ---: | ---: | ---: |")
    for name, values in results.items():
        mean = statistics.fmean(values)
        print(f"| {name} | {mean:.1f} | {min(values):.1f} | {max(values):.1f} | {mean / baseline - 1:+.2%} |")
    print("\n(target: under 0.5 % slower than no exporter)\n")


# ---- report ------------------------------------------------------------------------------------


def machine_line(gpu: int, fake_gpus: int) -> str:
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    common = f"{when}, Python {platform.python_version()}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}"
    if fake_gpus:
        return f"{common}; {fake_gpus} fake GPU(s) (tests/support/fakes/nvml.py), no driver"
    try:
        import pynvml as nvml
    except ImportError:
        raise BenchError("the nvidia-ml-py package (module pynvml) is not installed") from None
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as error:
        raise BenchError(f"this benchmark needs an NVIDIA GPU: NVML cannot start ({error}); --fake-gpus N checks the bench without one") from None
    try:
        count = nvml.nvmlDeviceGetCount()
        if not 0 <= gpu < count:
            raise BenchError(f"--gpu {gpu}: NVML sees {count} GPU(s)")
        handle = nvml.nvmlDeviceGetHandleByIndex(gpu)
        name, driver = nvml.nvmlDeviceGetName(handle), nvml.nvmlSystemGetDriverVersion()
    finally:
        nvml.nvmlShutdown()
    text = lambda value: value.decode() if isinstance(value, bytes) else str(value)  # noqa: E731
    return f"{common}; GPU {gpu}: {text(name)} ({count} GPU(s) on the machine), driver {text(driver)}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parts", default="floor,overhead", help="comma-separated parts to run: floor, overhead, perturbation (default floor,overhead)")
    parser.add_argument("--gpu", type=int, default=0, help="NVML index of the GPU the load and the matmul use (default 0)")
    parser.add_argument("--fake-gpus", type=int, default=0, help="run on this many fake GPUs (tests/support/fakes/nvml.py) instead of the real ones")
    parser.add_argument("--load", choices=("matmul", "none"), default="matmul", help="a steady bf16 matmul in another process during floor and overhead (default), or none")
    parser.add_argument("--baseline", help="another checkout of this project: its daemon is measured too, at 1 s and 100 ms")
    parser.add_argument("--nvitop-cmd", help="how to start nvitop-exporter, e.g. 'env PYTHONPATH=/tmp/site python3 -m nvitop_exporter'")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds of the overhead part (default 2)")
    parser.add_argument("--seconds", type=float, default=40.0, help="one exporter's window at 1 s, per round (default 40)")
    parser.add_argument("--fast-seconds", type=float, default=20.0, help="one daemon's window at 100 ms, per round (default 20)")
    parser.add_argument("--warmup", type=float, default=32.0, help="all exporters together before the rounds, scraped every --scrape-every s (default 32)")
    parser.add_argument("--scrape-every", type=float, default=15.0, help="seconds between gzip scrapes, as Prometheus (default 15)")
    parser.add_argument("--settle", type=float, default=2.0, help="seconds between continuing an exporter and its window (default 2)")
    parser.add_argument("--floor-polls", type=int, default=12, help="polls recorded by the floor part (default 12)")
    parser.add_argument("--floor-interval", type=float, default=1.0, help="seconds between the floor part's polls (default 1)")
    parser.add_argument("--matmul-seconds", type=float, default=15.0, help="perturbation: one measured matmul run (default 15)")
    parser.add_argument("--perturbation-rounds", type=int, default=3, help="perturbation: interleaved rounds of its three conditions (default 3)")
    args = parser.parse_args()
    parts = [part.strip() for part in args.parts.split(",") if part.strip()]
    unknown = set(parts) - {"overhead", "floor", "perturbation"}
    if unknown or not parts:
        parser.error(f"--parts: unknown part(s) {sorted(unknown)}; choose from floor, overhead, perturbation")
    if args.fake_gpus and "perturbation" in parts:
        parser.error("--fake-gpus: the perturbation part needs a real GPU")
    if args.rounds < 1 or args.seconds <= 0 or args.fast_seconds <= 0 or args.scrape_every <= 0:
        parser.error("--rounds, --seconds, --fast-seconds and --scrape-every must be positive")
    try:
        print(machine_line(args.gpu, args.fake_gpus))
        chosen, skipped = subjects(args) if "overhead" in parts else ([], [])
        kind = "none" if args.fake_gpus else args.load
        budget = 120 + args.floor_polls * args.floor_interval + args.warmup + args.rounds * sum((args.seconds if s.interval == "1s" else args.fast_seconds) + args.settle + 1 for s in chosen)
        with load(kind, args.gpu, budget) as running:
            print(f"Load: {running}" + (" (fake GPUs)" if args.fake_gpus else "") + "\n")
            for line in skipped:
                print(f"- {line}")
            if skipped:
                print()
            if "floor" in parts:
                floor(args)
            if "overhead" in parts:
                overhead(chosen, args)
        if "perturbation" in parts:
            perturbation(args.gpu, args.matmul_seconds, args.perturbation_rounds)
    except (BenchError, SelftestUnavailable) as error:
        print(f"compare_nvitop: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
