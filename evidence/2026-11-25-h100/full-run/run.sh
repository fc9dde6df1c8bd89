#!/usr/bin/env bash
# The final device run of 2026-11-25: the selftest, then the daemon beside a real PyTorch training loop.
set -u
export PYTHONUNBUFFERED=1
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; python3 --version; git log --oneline -1 2>/dev/null; date -u; } > "$OUT/env.txt" 2>&1
timeout 240 python3 -m gpueff selftest --markdown > "$OUT/selftest.md" 2>> "$OUT/env.txt"
echo "selftest rc=$?" >> "$OUT/env.txt"
python3 -m gpueff --web.listen-address=127.0.0.1:9835 --log.level=info > "$OUT/daemon.log" 2>&1 &
daemon=$!
sleep 3
python3 evidence/2026-11-25-h100/full-run/train_job.py 45 > "$OUT/job.log" 2>&1 &
job=$!
get() { python3 -c "import sys, urllib.request; sys.stdout.write(urllib.request.urlopen('http://127.0.0.1:9835' + sys.argv[1], timeout=10).read().decode())" "$1"; }
sleep 30
for i in 1 2 3; do echo "=== scrape $i $(date -u +%T)"; get /metrics | grep -E '^gpueff_(gpu_utilization_ratio|sm_active_ratio|efficiency_ratio|bottleneck|estimated_flops_per_second|estimated_total|mfu|mismatch|tensor_active|dram_active|power_watts)' ; sleep 5; done > "$OUT/metrics.txt" 2>&1
get /metrics > "$OUT/metrics_full.txt" 2>&1
{ get /api/live | head -c 20000; echo; echo "=== top"; python3 -m gpueff top --url http://127.0.0.1:9835 --once --color never; echo "=== landing page bytes: $(get / | wc -c)"; } > "$OUT/live_top.txt" 2>&1
wait "$job"
kill "$daemon"; wait "$daemon"; echo "daemon rc=$?" >> "$OUT/env.txt"
# Overhead beside nvitop-exporter 1.7.2 (nvitop, nvitop-exporter and psutil carried as wheels in .whl/), each alone at 1 s on the same GPU.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
mkdir -p /tmp/bin && printf '#!/bin/sh\nPYTHONPATH=/tmp/site exec python3 -m nvitop_exporter "$@"\n' > /tmp/bin/nvitop-exporter && chmod +x /tmp/bin/nvitop-exporter
PATH=/tmp/bin:$PATH timeout 250 python3 bench/compare_nvitop.py --parts overhead,floor --minutes 0.75 --scrapes 20 > "$OUT/compare_nvitop.md" 2>&1
echo "compare rc=$?" >> "$OUT/env.txt"
