#!/usr/bin/env python3
"""Two owners on one GPU beside the daemon (owners never cross, docs/security.md): whose each
process is, and that one tenant's process never changes another's class, holder, job or app.

Two Unix users (``--uids``, made with ``useradd`` where it exists; the uids work without it) share
GPU 0. User A runs a real PyTorch job, bf16 matmuls of 8192 x 8192 for ``--seconds``, counting them
on its own Prometheus endpoint. ``--b-after`` seconds into it, user B starts a tiny CUDA process of
the same program (the same executable, so the same NVML name and ``comm``) that holds 64 MiB and
runs one small kernel a second, for as long again: B shares the GPU with A, then holds it alone.
Both are children of this script, so on a bare host they share a launcher. The daemon (root, NVML,
1 s, ``sharing.enabled``, one app ``process: python`` bound to ``user: A``) is scraped every
second; beside each scrape the GPU's processes are read from NVML and their owners and jobs found
in /proc as the daemon finds them (``gpueff/attribution``).

What it shows, phase by phase (A alone, A and B, B alone; each phase's first ``WARMUP_SECONDS``
left out of the class shares, since the class is judged over a window): GPU 0's class (A's work
reads the same with B beside it), the holders (``process/<uid A>:python3`` and ``process/<uid
B>:python3``: one program name, two owners, two holders), the jobs (a GPU of two owners is in no
job; each owner's processes are its own process group) and the app's GPUs (B's process of the same
name never joins A's app: with B alone the app has no GPU).

Writes DIR/summary.json, DIR/scrapes.jsonl (one line a second), the daemon's and the workloads'
logs. Needs root (to start processes as other users), PyTorch with CUDA, one GPU.

Run: python3 bench/gpu/two_owners.py --out DIR [--seconds 40] [--b-after 12] [--uids 2001,2002]
     python3 bench/gpu/two_owners.py report DIR/summary.json    # the phases as a Markdown table
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import select
import shutil
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the tree under test, for its /proc readers

from gpueff.attribution.holders import HolderResolver  # noqa: E402
from gpueff.attribution.jobs import JobResolver, memberships  # noqa: E402
from gpueff.attribution.owner import real_uid  # noqa: E402
from gpueff.sample import DeviceInfo, GpuProcess, GpuSample  # noqa: E402

WARMUP_SECONDS = 7  # the class window is 5 s and a new class must hold 2 polls
WORK = Path("/tmp/gpueff-two-owners")

A_JOB = '''
import sys, time
import torch
from prometheus_client import Counter, start_http_server
port, seconds = int(sys.argv[1]), float(sys.argv[2])
done = Counter("a_matmuls", "bf16 8192x8192 matmuls done")
start_http_server(port, addr="127.0.0.1")
x = torch.randn(8192, 8192, dtype=torch.bfloat16, device="cuda")
y = torch.randn(8192, 8192, dtype=torch.bfloat16, device="cuda")
torch.cuda.synchronize()
print("ready", flush=True)
end = time.monotonic() + seconds
while time.monotonic() < end:
    for _ in range(10):
        z = x @ y
    torch.cuda.synchronize()
    done.inc(10)
print("done", done._value.get(), flush=True)
'''

B_TINY = '''
import sys, time
import torch
seconds = float(sys.argv[1])
held = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")
torch.cuda.synchronize()
print("ready", flush=True)
end = time.monotonic() + seconds
while time.monotonic() < end:
    held[:4096].add_(1)
    torch.cuda.synchronize()
    time.sleep(1.0)
print("done", flush=True)
'''


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def get(port: int, path: str) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def make_user(uid: int, name: str, notes: list[str]) -> None:
    """``useradd`` where it exists; the numeric uid is what the daemon reads either way."""
    if shutil.which("useradd") is None:
        notes.append(f"no useradd: uid {uid} runs without a passwd entry")
        return
    done = subprocess.run(["useradd", "--no-create-home", "--uid", str(uid), "--user-group", "--shell", "/usr/sbin/nologin", name], capture_output=True, text=True)
    notes.append(f"useradd {name} ({uid}): rc {done.returncode} {done.stderr.strip()}")


def device_groups() -> list[int]:
    """The groups owning the NVIDIA device files, for children that are not root (nothing is chmod-ed)."""
    return sorted({os.stat(path).st_gid for path in Path("/dev").glob("nvidia*") if path.exists()} - {0})


def as_user(uid: int, command: list[str], log: Path, groups: list[int]) -> subprocess.Popen[str]:
    home = WORK / f"home-{uid}"
    home.mkdir(parents=True, exist_ok=True)
    os.chown(home, uid, uid)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "PYTHONUNBUFFERED": "1", "CUDA_CACHE_PATH": str(home / "nv")}
    for key in ("LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES", "PYTHONPATH"):
        if key in os.environ:
            env[key] = os.environ[key]
    output = log.open("w")
    return subprocess.Popen(command, user=uid, group=uid, extra_groups=groups, env=env, cwd=home, stdout=subprocess.PIPE, stderr=output, text=True)


def torch_readable(uid: int, groups: list[int], notes: list[str]) -> bool:
    """Can ``uid`` import torch and prometheus_client and see the GPU? Where either sits below a
    folder others cannot enter (a root-only home), the folders above it are given others' search (x)
    permission; nothing else is changed."""
    probe = [sys.executable, "-c", "import prometheus_client, torch; print(torch.cuda.is_available())"]
    for attempt in range(2):
        child = as_user(uid, probe, WORK / f"probe-{uid}.log", groups)
        out, _ = child.communicate(timeout=180)
        if out.strip() == "True":
            return True
        notes.append(f"uid {uid} probe {attempt}: {out.strip()!r} {(WORK / f'probe-{uid}.log').read_text()[-300:]!r}")
        if attempt == 0:
            import prometheus_client
            import torch

            for module in (torch, prometheus_client):
                assert module.__file__ is not None
                for parent in Path(module.__file__).resolve().parents:
                    mode = parent.stat().st_mode
                    if not mode & 0o001:
                        os.chmod(parent, mode | 0o001)
                        notes.append(f"o+x on {parent} (so uid {uid} reaches {module.__name__})")
    return False


def parse_metrics(body: str) -> dict[str, Any]:
    """The series this run reads, from one /metrics body."""
    from prometheus_client.parser import text_string_to_metric_families

    found: dict[str, Any] = {"classes": {}, "holders": {}, "holder_states": {}, "job_series": [], "app_gpus": [], "app": {}, "gpu": {}}
    for family in text_string_to_metric_families(body):
        for sample in family.samples:
            labels, value = sample.labels, sample.value
            if sample.name == "gpueff_bottleneck" and value == 1:
                found["classes"][labels["gpu"]] = labels["class"]
            elif sample.name == "gpueff_holder_busy_seconds_total":
                found["holders"][f"{labels['gpu']}/{labels['holder_kind']}/{labels['holder']}"] = value
            elif sample.name == "gpueff_holder_state_seconds_total":
                found["holder_states"][f"{labels['gpu']}/{labels['holder_kind']}/{labels['holder']}/{labels['state']}"] = value
            elif sample.name.startswith("gpueff_job_"):
                found["job_series"].append(f"{sample.name}{json.dumps(labels, sort_keys=True)} {value}")
            elif sample.name == "gpueff_app_gpu_info":
                found["app_gpus"].append(labels["gpu"])
            elif sample.name in ("gpueff_app_up", "gpueff_app_gpus", "gpueff_app_throughput_per_second", "gpueff_app_units_per_joule"):
                found["app"][sample.name] = value
            elif sample.name in ("gpueff_gpu_utilization_ratio", "gpueff_sm_active_ratio", "gpueff_tensor_active_ratio", "gpueff_compute_processes", "gpueff_power_watts"):
                found["gpu"].setdefault(labels.get("gpu", ""), {})[sample.name] = value
    return found


def observe(nvml: Any, handle: Any, device: DeviceInfo, jobs: JobResolver, holders: HolderResolver) -> dict[str, Any]:
    """NVML's processes on the GPU, and the owner, job and holder /proc gives each (the daemon's readers)."""
    listed = nvml.nvmlDeviceGetComputeRunningProcesses(handle)
    processes = tuple(GpuProcess(entry.pid, "python3") for entry in listed)
    sample = GpuSample(device=device, timestamp=time.monotonic(), processes=processes)
    member = memberships([sample], jobs)
    identities = holders.resolve((process.pid, process.name) for process in processes)
    return {
        "processes": [{"pid": entry.pid, "uid": real_uid(entry.pid, Path("/proc")), "memory_bytes": entry.usedGpuMemory,
                       "owner": f"{jobs.owners[entry.pid].kind}/{jobs.owners[entry.pid].id}" if entry.pid in jobs.owners else None,
                       "holder": f"{identities[entry.pid].holder.kind}/{identities[entry.pid].holder.label}" if entry.pid in identities else None} for entry in listed],
        "proc_jobs": {uuid: [f"{key.kind}/{key.id}" for key in keys] for uuid, keys in member.items()},
        "launchers": dict(jobs.launcher_names),
    }


def phase_of(uids: set[int | None], a: int, b: int) -> str:
    if uids == {a}:
        return "a_alone"
    if uids == {a, b}:
        return "a_and_b"
    if uids == {b}:
        return "b_alone"
    return "none" if not uids else "other"


def run(args: argparse.Namespace) -> dict[str, Any]:
    import pynvml

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    uid_a, uid_b = (int(part) for part in args.uids.split(","))
    notes: list[str] = []
    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)
    os.chmod(WORK, 0o755)
    for uid, name in ((uid_a, "gpueff_tenant_a"), (uid_b, "gpueff_tenant_b")):
        make_user(uid, name, notes)
    (WORK / "a_job.py").write_text(A_JOB)
    (WORK / "b_tiny.py").write_text(B_TINY)
    groups = device_groups()
    notes.append(f"device file groups given to the tenants: {groups}")
    if not all(torch_readable(uid, groups, notes) for uid in (uid_a, uid_b)):
        raise SystemExit("the tenants cannot use torch on the GPU: " + "; ".join(notes))

    port_a, port = free_port(), free_port()
    config = WORK / "gpueff.yml"
    config.write_text(json.dumps({
        "sharing": {"enabled": True},
        "proc_root": "/proc",
        "apps": [{"name": "a-matmuls", "url": f"http://127.0.0.1:{port_a}/metrics", "counter": "a_matmuls_total", "unit": "matmuls",
                  "process": "python", "user": uid_a, "scrape_interval": "1s", "flops_per_unit": 2 * 8192**3}],
    }))
    log = (out / "daemon.log").open("w")
    daemon = subprocess.Popen([sys.executable, "-m", "gpueff", "--backend", "nvml", "--config", str(config), "--collect-interval", "1s",
                               "--web.listen-address", f"127.0.0.1:{port}", "--log.level", "info"], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    uuid = pynvml.nvmlDeviceGetUUID(handle)
    uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
    device = DeviceInfo(index=0, uuid=uuid, name="gpu")
    jobs, holders = JobResolver(Path("/proc")), HolderResolver(Path("/proc"))
    records: list[dict[str, Any]] = []
    a = b = None
    try:
        deadline = time.monotonic() + 60
        while get_status(port) != 200:
            if daemon.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the daemon did not become ready: {(out / 'daemon.log').read_text()[-2000:]}")
            time.sleep(0.2)
        a = as_user(uid_a, [sys.executable, str(WORK / "a_job.py"), str(port_a), str(args.seconds)], out / "a.log", groups)
        assert a.stdout is not None
        if not select.select([a.stdout], [], [], 180)[0] or a.stdout.readline().strip() != "ready":
            raise SystemExit(f"A's job did not start: {(out / 'a.log').read_text()[-2000:]}")
        started = time.monotonic()
        tick = started
        while True:
            now = time.monotonic() - started
            if b is None and now >= args.b_after:
                b = as_user(uid_b, [sys.executable, str(WORK / "b_tiny.py"), str(args.seconds)], out / "b.log", groups)
            status, body = get(port, "/metrics")
            record = {"t": round(now, 2), "status": status, **parse_metrics(body.decode()), **observe(pynvml, handle, device, jobs, holders)}
            record["phase"] = phase_of({entry["uid"] for entry in record["processes"]}, uid_a, uid_b)
            records.append(record)
            if b is not None and b.poll() is not None and a.poll() is not None:
                break
            if now > args.seconds * 2 + args.b_after + 60:
                notes.append("stopped at the time limit")
                break
            tick += 1.0
            time.sleep(max(0.0, tick - time.monotonic()))
        for _ in range(3):  # the GPU left alone
            time.sleep(1.0)
            status, body = get(port, "/metrics")
            records.append({"t": round(time.monotonic() - started, 2), "status": status, **parse_metrics(body.decode()), **observe(pynvml, handle, device, jobs, holders), "phase": "none"})
    finally:
        for child in (a, b):
            if child is not None and child.poll() is None:
                child.kill()
                child.wait()
        daemon.terminate()
        try:
            daemon.wait(15)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()
        log.close()
        pynvml.nvmlShutdown()
    a_out = a.stdout.read() if a is not None and a.stdout is not None else ""
    with (out / "scrapes.jsonl").open("w") as file:
        for record in records:
            file.write(json.dumps(record, sort_keys=True) + "\n")
    summary = {"uids": {"a": uid_a, "b": uid_b}, "notes": notes, "a_output": a_out.strip(), "gpu": gpu_name(), "phases": summarize(records), "python": sys.version.split()[0], "torch": torch_version()}
    (out / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
    return summary


def get_status(port: int) -> int:
    try:
        return get(port, "/-/ready")[0]
    except OSError:
        return 0


def gpu_name() -> str:
    done = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"], capture_output=True, text=True)
    return done.stdout.strip()


def torch_version() -> str:
    import torch

    return f"{torch.__version__} (CUDA {torch.version.cuda})"


def summarize(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Per phase: the scrapes, GPU 0's classes after the phase's warm-up, the means of its readings,
    the holders' busy seconds gained, the job series and memberships seen, the app's GPUs, the owners."""
    phases: dict[str, Any] = {}
    for name in ("a_alone", "a_and_b", "b_alone"):
        mine = [record for record in records if record["phase"] == name]
        if not mine:
            phases[name] = {"scrapes": 0}
            continue
        first = mine[0]["t"]
        judged = [record for record in mine if record["t"] - first >= WARMUP_SECONDS]
        gains = {holder: value - mine[0]["holders"].get(holder, 0.0) for holder, value in mine[-1]["holders"].items()}
        means = {}
        for key in ("gpueff_gpu_utilization_ratio", "gpueff_sm_active_ratio", "gpueff_tensor_active_ratio", "gpueff_power_watts"):
            values = [record["gpu"].get("0", {}).get(key) for record in judged]
            known = [value for value in values if value is not None]
            means[key] = round(sum(known) / len(known), 3) if known else None
        phases[name] = {
            "scrapes": len(mine),
            "seconds": [first, mine[-1]["t"]],
            "classes_after_warmup": dict(Counter(record["classes"].get("0", "-") for record in judged)),
            "means_after_warmup": means,
            "holders_busy_seconds_gained": {holder: round(value, 3) for holder, value in sorted(gains.items()) if value > 0},
            "holders_seen": sorted({holder for record in mine for holder in record["holders"]}),
            "job_series": sorted({line.rsplit(" ", 1)[0] for record in mine for line in record["job_series"]}),
            "proc_jobs": sorted({json.dumps(record["proc_jobs"], sort_keys=True) for record in mine}),
            "owners": sorted({f"{entry['pid']} uid {entry['uid']}: owner {entry['owner']}, holder {entry['holder']}" for record in mine for entry in record["processes"]}),
            "app_gpus": dict(Counter(",".join(record["app_gpus"]) or "none" for record in mine)),
            "app_last": mine[-1]["app"],
        }
    return phases


def report(path: str) -> None:
    summary = json.loads(Path(path).read_text())
    print(f"uids: A {summary['uids']['a']}, B {summary['uids']['b']}; {summary['gpu']}; torch {summary['torch']}")
    print()
    print("| phase | scrapes | GPU 0 class (after the first 7 s) | util | SM | tensor | holders (busy s gained) | job series | /proc jobs | app GPUs (scrapes) |")
    print("| --- | ---: | --- | ---: | ---: | ---: | --- | --- | --- | --- |")
    for name, phase in summary["phases"].items():
        if not phase["scrapes"]:
            print(f"| {name} | 0 | | | | | | | | |")
            continue
        means = phase["means_after_warmup"]
        classes = ", ".join(f"{klass} {count}" for klass, count in phase["classes_after_warmup"].items())
        held = ", ".join(f"`{holder}` {value}" for holder, value in phase["holders_busy_seconds_gained"].items()) or "none"
        print(f"| {name} | {phase['scrapes']} | {classes} | {means['gpueff_gpu_utilization_ratio']} | {means['gpueff_sm_active_ratio']} | {means['gpueff_tensor_active_ratio']} | {held} | {len(phase['job_series'])} | {'; '.join(phase['proc_jobs'])} | {phase['app_gpus']} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command")
    show = sub.add_parser("report")
    show.add_argument("summary")
    parser.add_argument("--out", default="two-owners")
    parser.add_argument("--seconds", type=float, default=40.0)
    parser.add_argument("--b-after", type=float, default=12.0)
    parser.add_argument("--uids", default="2001,2002")
    args = parser.parse_args()
    if args.command == "report":
        report(args.summary)
        return
    print(json.dumps(run(args)["phases"], indent=2))


if __name__ == "__main__":
    main()
