# Final device run of issue 28's third round, part A: this tree against .dev/base (main 0fbda2f) and nvitop-exporter.
set -u
export PYTHONUNBUFFERED=1
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; python3 --version; python3 -c "import importlib.metadata as m; print('nvidia-ml-py', m.version('nvidia-ml-py'))"; git log --oneline -1 2>/dev/null; date -u; nproc; uptime; } > $OUT/env.txt 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl > /dev/null 2>&1
timeout 80 python3 bench/gpm_metric_cost.py > $OUT/gpm_metric_cost.txt 2>&1
timeout 480 python3 bench/compare_nvitop.py --baseline .dev/base --nvitop-cmd "env PYTHONPATH=/tmp/site python3 -m nvitop_exporter" > $OUT/compare_nvitop.md 2> $OUT/compare_nvitop.err
echo "compare rc=$?" >> $OUT/env.txt; date -u >> $OUT/env.txt
