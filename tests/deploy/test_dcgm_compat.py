"""The dcgm-exporter compatibility rules of both generations (deploy/prometheus/dcgm-exporter-compat.yml,
the old names; dcgm-exporter-compat-dcgm47.yml, the DCGM 4.7 names) and the migration guide against
dcgm-exporter's own default counters file and DCGM's public field header: generated files current,
promtool's unit tests (the shipped rules, hostname/per-pod variants, and alert rules written for
dcgm-exporter firing unchanged), every default counter either recorded or explained in each
generation, every new name one DCGM's header gives, and a real Prometheus recording MIG labels,
per-pod copies and hostname from two running daemons with both generations loaded. (Its public
dashboard's queries, under both generations' names, and the alert examples' expressions run
against the real Prometheus of tests/system/test_end_to_end_prometheus.py.)"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path

import pytest
import yaml
from conftest import DCGM_FAKE, ROOT, free_port, http_get, running_daemon
from fakes.kubelet import FakeKubelet, pod
from waiting import PATIENCE

PROMETHEUS_DIR = ROOT / "deploy" / "prometheus"
GUIDE = ROOT / "docs" / "migrating-from-dcgm-exporter.md"
DCGM_EXPORTER = ROOT / "tests" / "deploy" / "dcgm_exporter"
FIELDS = DCGM_EXPORTER / "default-counters.fields"
ALIASES = DCGM_EXPORTER / "dcgm-field-aliases.txt"
sys.path.insert(0, str(PROMETHEUS_DIR))

import build_dcgm_compat  # noqa: E402

pytestmark = pytest.mark.e2e  # promtool's rule unit tests


def run(*command: str) -> str:
    result = subprocess.run(command, cwd=PROMETHEUS_DIR, capture_output=True, text=True, timeout=PATIENCE)
    assert result.returncode == 0, f"{' '.join(command)} failed:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def default_counters() -> list[tuple[str, str, bool]]:
    """(field, Prometheus type, enabled) for each field line of dcgm-exporter's default counters."""
    rows = [line.split(",") for line in FIELDS.read_text().splitlines() if line and not line.startswith("#")]
    return [(name, kind, enabled == "1") for name, kind, enabled in rows]


def guide_section(heading: str) -> str:
    """The guide's text under ``heading`` (a whole Markdown heading line), up to the next ## heading."""
    return GUIDE.read_text(encoding="utf-8").split(f"\n{heading}\n", 1)[1].split("\n## ", 1)[0]


def recorded(generation: build_dcgm_compat.Generation = build_dcgm_compat.LEGACY, per_pod: bool = False) -> dict[str, str]:
    rules = yaml.safe_load((generation.rules_per_pod if per_pod else generation.rules).read_text())["groups"][0]["rules"]
    return {rule["record"]: rule["expr"] for rule in rules}


def aliases() -> dict[str, str]:
    """Old field name -> new, as DCGM 4.6.0's public dcgm_fields.h defines them."""
    rows = [line.split(",") for line in ALIASES.read_text().splitlines() if line and not line.startswith("#")]
    return {old: new for old, new in rows}


def test_generated_files_equal_their_source():
    subprocess.run([sys.executable, str(PROMETHEUS_DIR / "build_dcgm_compat.py"), "--check"], cwd=ROOT, check=True, timeout=PATIENCE)


def test_promtool_checks_and_unit_tests_pass():
    promtool = shutil.which("promtool")
    assert promtool, "promtool is not installed: tests/run.sh installs the Debian package prometheus"
    for generation in build_dcgm_compat.GENERATIONS.values():
        assert "SUCCESS" in run(promtool, "check", "rules", generation.rules.name, generation.rules_per_pod.name)
    assert "SUCCESS" in run(promtool, "test", "rules", "dcgm-exporter-compat.test.yml")
    assert "SUCCESS" in run(promtool, "test", "rules", "dcgm-exporter-compat-dcgm47.test.yml")


def test_every_default_counter_is_recorded_or_explained():
    names = set(recorded())
    not_provided = set(re.findall(r"`(DCGM_[A-Z0-9_]+)`", guide_section("### Not provided")))
    labels = set(re.findall(r"`(DCGM_[A-Z0-9_]+)`", guide_section("## Labels")))
    fields = default_counters()
    assert len(fields) > 50
    for name, kind, _ in fields:
        where = labels if kind == "label" and name in labels else names | not_provided
        assert name in where, f"{name} ({kind}) from dcgm-exporter's default counters is neither recorded nor explained in {GUIDE.name}"
    assert not names & not_provided, "recorded and listed as not provided"


def test_every_dcgm47_name_is_the_one_dcgms_public_header_gives_for_the_old_name():
    """No new name is made up: each is the field DCGM's dcgm_fields.h defines the old name as."""
    header = aliases()
    assert len(header) > 300 and header["DCGM_FI_DEV_GPU_UTIL"] == "DCGM_FI_DEV_GPU_UTIL_RATIO"
    for old, new in build_dcgm_compat.DCGM47_NAMES.items():
        assert header.get(old) == new, f"{old}: DCGM's header names it {header.get(old)}, the rules {new}"
    assert build_dcgm_compat.NEW.driver_label == header["DCGM_FI_DRIVER_VERSION"] == "DCGM_FI_SYSTEM_DRIVER_VERSION"


def test_every_default_counter_is_recorded_or_explained_in_the_dcgm47_generation_too():
    """A field the header renames is recorded under its new name where the old generation records it;
    one it does not rename is in the guide's list of what the dcgm47 rules leave out; the new names of
    the series not provided and of the label fields are named in the guide."""
    header = aliases()
    names = set(recorded(build_dcgm_compat.NEW))
    old_names = set(recorded())
    section = guide_section("### Not provided in the DCGM 4.7 generation")
    explained = set(re.findall(r"`(DCGM_[A-Z0-9_]+)`", section))
    labels = set(re.findall(r"`(DCGM_[A-Z0-9_]+)`", guide_section("## Labels")))
    for name, kind, _ in default_counters():
        new = header.get(name)
        if name in old_names:
            assert (new in names) if new else (name in explained), f"{name}: recorded in the old generation, neither recorded ({new}) nor explained in the new"
        elif kind == "label" and name in labels:
            assert header[name] in labels, f"the label {name}: its new name {header[name]} is not in the guide's Labels"
        elif new:
            assert new in explained, f"{name} is not provided: say so of its new name {new} too"
    assert not names & old_names, "a series name both generations record"
    assert f"{len(build_dcgm_compat.COMPAT)} rules and one label helper\n(the DCGM 4.7 generation: {len(build_dcgm_compat.DCGM47)} and one)" in GUIDE.read_text()


def test_the_dcgm47_rules_are_in_the_unit_and_type_their_names_say():
    by_name = {rule.name: rule for rule in build_dcgm_compat.DCGM47}
    for rule in build_dcgm_compat.DCGM47:
        assert (rule.type == "counter") == rule.name.endswith("_TOTAL"), rule.name
        if rule.name.endswith("_RATIO"):
            assert rule.unit == "ratio" and "* 100" not in rule.expr, rule.name
    assert by_name["DCGM_FI_DEV_GPU_UTIL_RATIO"].expr == "gpueff_gpu_utilization_instant_ratio"
    assert {rule.unit for rule in build_dcgm_compat.DCGM47 if rule.name.endswith("_WATTS")} == {"W"}
    assert {rule.unit for rule in build_dcgm_compat.DCGM47 if rule.name.endswith("_CELSIUS")} == {"°C"}


def test_both_generations_load_together_without_sharing_a_record_or_group():
    for per_pod in (False, True):
        legacy, new = recorded(per_pod=per_pod), recorded(build_dcgm_compat.NEW, per_pod)
        assert not set(legacy) & set(new), per_pod
    labels = ", ".join(build_dcgm_compat.identity_labels(driver_label="DCGM_FI_SYSTEM_DRIVER_VERSION"))
    for name, expr in recorded(build_dcgm_compat.NEW).items():
        if name != build_dcgm_compat.NEW.labels_record:
            assert f"group_left ({labels})\n{build_dcgm_compat.NEW.labels_record}" in expr, name
    assert build_dcgm_compat.LEGACY.group != build_dcgm_compat.NEW.group


def test_the_dcgm47_dashboard_queries_are_nvidias_with_the_headers_new_names():
    """tests/deploy/dcgm_exporter/dashboard-queries-dcgm47.json is the public dashboard's queries with each
    field renamed as DCGM's header renames it; a panel whose field the dcgm47 rules leave out is listed
    as left out, not rewritten with a guessed name."""
    old = json.loads((DCGM_EXPORTER / "dashboard-queries.json").read_text())
    new = json.loads((DCGM_EXPORTER / "dashboard-queries-dcgm47.json").read_text())
    header, provided = aliases(), {rule.name for rule in build_dcgm_compat.DCGM47}

    def renamed(expr: str) -> str:
        return re.sub(r"DCGM_FI_[A-Z0-9_]+", lambda match: header[match.group(0)], expr)

    kept = [query for query in old["queries"] if all(header.get(field) in provided for field in re.findall(r"DCGM_FI_[A-Z0-9_]+", query["expr"]))]
    assert new["queries"] == [{"panel": query["panel"], "expr": renamed(query["expr"])} for query in kept]
    assert new["variables"] == [{"name": variable["name"], "query": renamed(variable["query"])} for variable in old["variables"]]
    assert new["left_out"] == [{"panel": query["panel"], "fields": re.findall(r"DCGM_FI_[A-Z0-9_]+", query["expr"])} for query in old["queries"] if query not in kept]
    assert {item["panel"] for item in new["left_out"]} == {"GPU SM Clocks", "GPU Framebuffer Mem Used"}


def test_the_issues_most_queried_names_are_recorded_with_dcgm_exporters_types():
    types: dict[str, str] = {}
    for name, kind, enabled in default_counters():  # an enabled line's type wins over a commented-out one's
        if enabled or name not in types:
            types[name] = kind
    for rule in build_dcgm_compat.COMPAT:
        assert types.get(rule.name, rule.type) == rule.type, rule.name
    assert {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_SM_CLOCK",
            "DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_PROF_SM_OCCUPANCY", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_PROF_DRAM_ACTIVE", "DCGM_FI_PROF_GR_ENGINE_ACTIVE"} <= set(recorded())


def test_every_recorded_series_carries_dcgm_exporters_labels():
    for name, expr in recorded().items():
        if name != build_dcgm_compat.LABELS_RECORD:
            assert f"group_left ({', '.join(build_dcgm_compat.identity_labels())})" in expr, name


def promtool(*args: str, cwd=PROMETHEUS_DIR) -> str:
    binary = shutil.which("promtool")
    assert binary, "promtool is not installed: tests/run.sh installs the Debian package prometheus"
    result = subprocess.run([binary, *args], cwd=cwd, capture_output=True, text=True, timeout=PATIENCE)
    assert result.returncode == 0, f"promtool {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def test_alert_rules_written_for_dcgm_exporter_fire_unchanged_on_the_compat_series():
    """Xid (the value and err_code), temperature, ECC, row remapping, memory, NVLink, power throttling
    in ns and a MIG instance keyed on UUID and GPU_I_ID: each example alert fires as on dcgm-exporter."""
    assert "SUCCESS" in promtool("check", "rules", "alert-examples.yml", cwd=DCGM_EXPORTER)
    assert "SUCCESS" in promtool("test", "rules", "alert-examples.test.yml", cwd=DCGM_EXPORTER)


def test_the_hostname_and_per_pod_variant_labels_as_newer_dcgm_exporter_and_its_virtual_gpu_mode(tmp_path):
    shutil.copy(DCGM_EXPORTER / "variant.test.yml", tmp_path)
    assert build_dcgm_compat.main(["--host-label", "hostname", "--copy-per-pod", "--output", str(tmp_path / "compat-variant.yml")]) == 0
    text = (tmp_path / "compat-variant.yml").read_text()
    assert '"Hostname"' not in text and "Variant: --host-label hostname --copy-per-pod" in text
    assert "SUCCESS" in promtool("check", "rules", "compat-variant.yml", cwd=tmp_path)
    assert "SUCCESS" in promtool("test", "rules", "variant.test.yml", cwd=tmp_path)


def test_a_variant_needs_an_output_file_so_the_shipped_file_stays_dcgm_exporters_released_labels():
    for variant in (["--host-label", "hostname"], ["--generation", "dcgm47"]):
        with pytest.raises(SystemExit):
            build_dcgm_compat.main(variant)
    assert "Hostname" in build_dcgm_compat.RULES.read_text()


def test_the_dcgm47_variant_takes_the_host_label_and_the_per_pod_copy(tmp_path):
    output = tmp_path / "compat-dcgm47-variant.yml"
    assert build_dcgm_compat.main(["--generation", "dcgm47", "--host-label", "hostname", "--copy-per-pod", "--output", str(output)]) == 0
    text = output.read_text()
    assert '"Hostname"' not in text and "Variant: --host-label hostname --copy-per-pod" in text and build_dcgm_compat.NEW.shared_record in text
    rules = yaml.safe_load(text)["groups"][0]["rules"]
    assert [rule["record"] for rule in rules] == list(recorded(build_dcgm_compat.NEW, per_pod=True))
    assert all("hostname, pci_bus_id, DCGM_FI_SYSTEM_DRIVER_VERSION" in rule["expr"] for rule in rules[2:])
    assert "SUCCESS" in promtool("check", "rules", output.name, cwd=tmp_path)


PROMETHEUS = shutil.which("prometheus")


def prometheus_query(port: int, expr: str) -> list[dict]:
    status, body = http_get(f"http://127.0.0.1:{port}/api/v1/query?query={urllib.parse.quote(expr)}")
    assert status == 200, body
    return json.loads(body)["data"]["result"]


@pytest.mark.skipif(PROMETHEUS is None, reason="tests/run.sh installs the Debian package prometheus")
def test_a_real_prometheus_records_mig_labels_per_pod_copies_and_hostname_from_running_exporters(tmp_path, trace_paths):
    """Two real daemons scraped by a real Prometheus that loads the hostname/per-pod variant of both
    generations and the alert examples: the DCGM fake's MIG GPU instances get UUID = their GPU's,
    GPU_I_ID and GPU_I_PROFILE; the demo's GPU that two pods share (a real gRPC pod-resources server)
    is recorded once per pod, under the old names and the new; every rule evaluates without error."""
    socket_dir = Path(tempfile.mkdtemp(prefix="kl", dir="/tmp"))
    socket_path = socket_dir / "kubelet.sock"
    config = tmp_path / "config.yml"
    config.write_text(f"kubernetes:\n  enabled: true\n  pod_resources_socket: {socket_path}\n")
    pods = [pod("web", "infer-a", {"server": {"nvidia.com/gpu": ["GPU-replay-0-copy_2GB::0"]}}),
            pod("web", "infer-b", {"server": {"nvidia.com/gpu": ["GPU-replay-0-copy_2GB::1"]}})]
    rules, rules47 = tmp_path / "compat.yml", tmp_path / "compat-dcgm47.yml"
    assert build_dcgm_compat.main(["--host-label", "hostname", "--copy-per-pod", "--output", str(rules)]) == 0
    assert build_dcgm_compat.main(["--generation", "dcgm47", "--host-label", "hostname", "--copy-per-pod", "--output", str(rules47)]) == 0
    mig_env = {"FAKE_DCGM_TRACES": str(trace_paths["matmul_8192"]), "FAKE_DCGM_GPUS": "ampere", "FAKE_DCGM_MIG": "0:2"}
    port = free_port()
    try:
        with (FakeKubelet(socket_path, pods), running_daemon("--demo", "--config", str(config)) as demo,
              running_daemon("--backend", "dcgm", "--dcgm.bindings-path", DCGM_FAKE, "--collect-interval", "200ms", env=mig_env) as mig):
            (tmp_path / "prometheus.yml").write_text(yaml.safe_dump({
                "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
                "rule_files": [str(rules), str(rules47), str(DCGM_EXPORTER / "alert-examples.yml")],
                "scrape_configs": [{"job_name": "gpu-efficiency-exporter", "static_configs": [{"targets": [f"127.0.0.1:{demo.port}", f"127.0.0.1:{mig.port}"]}]}],
            }))
            log = (tmp_path / "prometheus.log").open("w")
            prometheus = subprocess.Popen([PROMETHEUS, f"--config.file={tmp_path / 'prometheus.yml'}", f"--storage.tsdb.path={tmp_path / 'data'}",
                                           f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=subprocess.STDOUT)
            try:
                deadline = time.monotonic() + PATIENCE
                mig_series: list[dict] = []
                mig47: list[dict] = []
                shared: list[dict] = []
                shared47: list[dict] = []
                groups: list[dict] = []

                def evaluated() -> bool:  # every rule of the three groups evaluated once: its health is no longer "unknown"
                    return len(groups) == 3 and all(rule["health"] != "unknown" for group in groups for rule in group["rules"])

                while time.monotonic() < deadline and (min(len(mig_series), len(mig47), len(shared), len(shared47)) < 2 or not evaluated()):
                    assert prometheus.poll() is None, (tmp_path / "prometheus.log").read_text()[-2000:]
                    with contextlib.suppress(OSError, KeyError, ValueError, AssertionError):
                        mig_series = prometheus_query(port, 'DCGM_FI_PROF_SM_ACTIVE{GPU_I_ID!=""}')
                        mig47 = prometheus_query(port, 'DCGM_FI_PROF_SM_UTIL_RATIO{GPU_I_ID!=""}')
                        shared = prometheus_query(port, 'DCGM_FI_DEV_GPU_UTIL{uuid="GPU-replay-0-copy_2GB"}')
                        shared47 = prometheus_query(port, 'DCGM_FI_DEV_GPU_UTIL_RATIO{uuid="GPU-replay-0-copy_2GB"}')
                        groups = json.loads(http_get(f"http://127.0.0.1:{port}/api/v1/rules")[1])["data"]["groups"]
                    time.sleep(0.3)
            finally:
                prometheus.terminate()
                prometheus.wait(PATIENCE)
    finally:
        shutil.rmtree(socket_dir, ignore_errors=True)
    for series in (mig_series, mig47):
        assert sorted((s["metric"]["UUID"], s["metric"]["GPU_I_ID"], s["metric"]["GPU_I_PROFILE"], s["metric"]["modelName"]) for s in series) == [
            ("GPU-fakedcgm-0-matmul_8192", str(n), "1g.10gb", "NVIDIA A100-SXM4-80GB") for n in (0, 1)], series
        assert {s["metric"]["uuid"] for s in series} == {"MIG-fakedcgm-0-matmul_8192-0", "MIG-fakedcgm-0-matmul_8192-1"}
    for series, driver in ((shared, "DCGM_FI_DRIVER_VERSION"), (shared47, "DCGM_FI_SYSTEM_DRIVER_VERSION")):
        assert sorted(s["metric"]["pod"] for s in series) == ["infer-a", "infer-b"] and {s["metric"]["hostname"] for s in series} == {"127.0.0.1"}
        assert len({s["value"][1] for s in series}) == 1 and all(s["metric"][driver] for s in series)  # each pod's copy holds the GPU's whole value
    assert all(0 <= float(s["value"][1]) <= 1 for s in shared47)
    unhealthy = [(rule["name"], rule.get("lastError")) for group in groups for rule in group["rules"] if rule["health"] != "ok"]
    assert len(groups) == 3 and not unhealthy, unhealthy
