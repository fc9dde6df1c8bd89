"""RSS (anonymous / file-backed) after each stage of what the daemon loads, in this interpreter.

Run from the repository root: python rss_stages.py (the imports are staged on purpose)."""

import ctypes
import sys
import time
from pathlib import Path


def rss() -> str:
    fields = {
        line.split(":")[0]: int(line.split()[1])
        for line in Path("/proc/self/status").read_text().splitlines()
        if line.startswith(("VmRSS", "RssAnon", "RssFile"))
    }
    return f"RSS {fields['VmRSS'] / 1024:6.1f} MB (anon {fields['RssAnon'] / 1024:5.1f}, file {fields['RssFile'] / 1024:5.1f})"


def stage(name: str) -> None:
    print(f"{name:45s}", rss())


stage("start")
import pynvml  # noqa: E402

stage("import pynvml")
sys.path.insert(0, ".")
from gpueff.commands import daemon  # noqa: E402, F401

stage("import gpueff.commands.daemon")
pynvml.nvmlInit()
stage("nvmlInit")
handle = pynvml.nvmlDeviceGetHandleByIndex(0)
stage("a device handle")
buffers = [pynvml.nvmlGpmSampleAlloc() for _ in range(3)]
stage("3 GPM sample buffers")
pynvml.nvmlGpmSampleGet(handle, buffers[0])
time.sleep(0.2)
pynvml.nvmlGpmSampleGet(handle, buffers[1])
stage("2 GPM samples taken")
pynvml.nvmlDeviceGetSamples(handle, pynvml.NVML_GPU_UTILIZATION_SAMPLES, 0)
stage("utilization samples read")
event_set = pynvml.nvmlEventSetCreate()
pynvml.nvmlDeviceRegisterEvents(handle, pynvml.nvmlEventTypeXidCriticalError, event_set)
stage("Xid event set")
ctypes.CDLL("libc.so.6").malloc_trim(0)
stage("malloc_trim(0)")
by_mapping: dict[str, int] = {}
current = "[anon]"
for line in Path("/proc/self/smaps").read_text().splitlines():
    parts = line.split()
    if not parts[0].endswith(":"):
        current = parts[5] if len(parts) > 5 else "[anon]"
    elif parts[0] == "Rss:":
        by_mapping[current] = by_mapping.get(current, 0) + int(parts[1])
print("largest mappings by RSS (kB):")
for name, kilobytes in sorted(by_mapping.items(), key=lambda item: -item[1])[:15]:
    print(f"  {kilobytes:7d}  {name}")
