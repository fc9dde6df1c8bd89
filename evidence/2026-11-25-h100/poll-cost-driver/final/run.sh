# Confirmation run of issue 28's third round on the final tree: the A/B again (shorter), the 100 ms call list, RSS in a clean venv.
set -u
export PYTHONUNBUFFERED=1
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; python3 --version; date -u; uptime; } > $OUT/env.txt 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl > /dev/null 2>&1
timeout 330 python3 bench/compare_nvitop.py --baseline .dev/base --nvitop-cmd "env PYTHONPATH=/tmp/site python3 -m nvitop_exporter" --seconds 25 --fast-seconds 12 --warmup 20 > $OUT/compare_nvitop.md 2> $OUT/compare_nvitop.err
echo "compare rc=$?" >> $OUT/env.txt
timeout 40 python3 bench/nvml_poll_cost.py calls --interval 0.1 --polls 40 > $OUT/calls_100ms.md 2>&1
python3 -m venv /tmp/clean > /dev/null 2>&1 && /tmp/clean/bin/python -m pip install -q --no-index .dev/probe/clean/*.whl > /dev/null 2>&1
PYTHONPATH=$PWD /tmp/clean/bin/python -c "import sys, gpueff.commands.cli, gpueff.commands.daemon, gpueff.backends.auto, gpueff.backends.nvml.backend; print('loaded of the lazy ones:', [m for m in ('hashlib','secrets','json','html','gpueff.trace','gpueff.backends.dcgm.backend') if m in sys.modules])" > $OUT/rss_clean.txt 2>&1
for run in 1 2; do
  (PYTHONPATH=$PWD exec /tmp/clean/bin/python -m gpueff --web.listen-address 127.0.0.1:9913 --collect-interval 1s --log.level warn > /dev/null 2>&1) &
  p=$!; sleep 30; echo "this tree, run $run: $(grep -E 'VmRSS|RssAnon|RssFile' /proc/$p/status | tr -s ' \t\n' ' ')" >> $OUT/rss_clean.txt; kill $p; wait $p; sleep 1
done
date -u >> $OUT/env.txt
