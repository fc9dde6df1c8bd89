# Part B: the selftest on this tree, and RSS in a virtual environment holding only the daemon's own dependencies.
set -u
export PYTHONUNBUFFERED=1
{ date -u; uptime; } > $OUT/env_b.txt
timeout 300 python3 -m gpueff selftest --markdown > $OUT/selftest.md 2>> $OUT/env_b.txt
echo "selftest rc=$?" >> $OUT/env_b.txt
python3 -m venv /tmp/clean > /dev/null 2>&1 && /tmp/clean/bin/python -m pip install -q --no-index .dev/probe/clean/*.whl > /dev/null 2>&1
/tmp/clean/bin/python -c "import sys; print('clean venv', sys.version.split()[0])" >> $OUT/env_b.txt
PYTHONPATH=$PWD timeout 60 /tmp/clean/bin/python .dev/probe/rss_stages.py > $OUT/rss_stages.txt 2>&1
for tree in . .dev/base . .dev/base; do
  (cd $tree && PYTHONPATH=$PWD exec /tmp/clean/bin/python -m gpueff --web.listen-address 127.0.0.1:9913 --collect-interval 1s --log.level warn > /dev/null 2>&1) &
  p=$!; sleep 30; echo "$tree: $(grep -E 'VmRSS|RssAnon|RssFile' /proc/$p/status | tr -s ' \t\n' ' ')" >> $OUT/rss_clean.txt; kill $p; wait $p; sleep 1
done
date -u >> $OUT/env_b.txt
