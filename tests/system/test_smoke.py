import re

from conftest import running_daemon


def test_demo_serves_replayed_metrics():
    with running_daemon("--demo", "--collect-interval", "200ms") as daemon:
        body = daemon.metrics()
    assert 'gpueff_exporter_build_info{version=' in body and 'replayed="true"' in body
    assert re.search(r'^gpueff_bottleneck\{gpu="4",uuid="GPU-replay-4-spin_1sm",[^}]*class="underfilled"\} 1$', body, re.M)
