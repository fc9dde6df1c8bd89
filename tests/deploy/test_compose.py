"""The one-command local stack (deploy/compose/) as far as a machine without a container engine can
test it: the compose files against the Compose Specification's JSON schema (vendored in
tests/deploy/compose_spec/), the wiring between the services, the Grafana provisioning files against
Grafana's format, and the stack's own Prometheus config run in Debian's Prometheus against the real
exporter and Debian's Alertmanager."""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import subprocess
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import ROOT, free_port, running_daemon
from grafana_provisioning import DASHBOARD_PROVIDERS, DATASOURCES, problems
from jsonschema import Draft7Validator
from repo import DASHBOARDS
from waiting import PATIENCE, wait_until

pytestmark = pytest.mark.e2e  # Debian's Prometheus and Alertmanager

COMPOSE = ROOT / "deploy" / "compose"
SCHEMA = json.loads((ROOT / "tests" / "deploy" / "compose_spec" / "compose-spec.json").read_text())
RULES = ROOT / "deploy" / "prometheus" / "gpu-efficiency-rules.yml"


def load(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def spec_errors(document: Any) -> list[str]:
    return [f"{'.'.join(str(part) for part in error.absolute_path)}: {error.message}" for error in Draft7Validator(SCHEMA).iter_errors(document)]


# ${NAME}, ${NAME:-default} and ${NAME:?error}, as the Compose Specification interpolates them.
VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::([-?])([^}]*))?\}")


class Unset(Exception):
    pass


def interpolated(document: Any, environment: dict[str, str]) -> Any:
    """The document as compose reads it with ``environment``: Unset (with the file's message) where a required variable is unset or empty."""
    if isinstance(document, dict):
        return {key: interpolated(value, environment) for key, value in document.items()}
    if isinstance(document, list):
        return [interpolated(value, environment) for value in document]
    if not isinstance(document, str):
        return document

    def value(found: re.Match[str]) -> str:
        name, kind, argument = found.groups()
        if environment.get(name):
            return environment[name]
        if kind == "?":
            raise Unset(f"{name}: {argument}")
        return argument if kind == "-" else environment.get(name, "")

    return VARIABLE.sub(value, document)


def binds(service: dict[str, Any]) -> dict[str, Path]:
    """A service's bind mounts: container path -> the host path, resolved from deploy/compose."""
    mounts = {}
    for volume in service.get("volumes", []):
        source, target = volume.split(":")[:2]
        if source.startswith("."):
            mounts[target] = (COMPOSE / source).resolve()
    return mounts


def test_the_compose_files_follow_the_compose_specification() -> None:
    for name in ("compose.yaml", "gpu.yaml"):
        assert spec_errors(load(COMPOSE / name)) == [], name
    broken = load(COMPOSE / "compose.yaml")
    broken["services"]["exporter"]["ports"] = "9947:9947"  # a string where the spec wants a list
    broken["services"]["grafana"]["volume"] = []  # a misspelt key
    assert len(spec_errors(broken)) >= 2  # the schema bites


def test_the_services_are_wired_to_each_other_and_to_the_shipped_files() -> None:
    compose, gpu = load(COMPOSE / "compose.yaml"), load(COMPOSE / "gpu.yaml")
    services = compose["services"]
    assert set(services) == {"exporter", "prometheus", "alertmanager", "grafana"}
    for name, service in services.items():
        for target, source in binds(service).items():
            assert source.exists(), f"{name}: {source} (mounted at {target}) is not in the repository"

    # The exporter: built from the repository's Dockerfile, the demo by default, real GPUs with gpu.yaml alone.
    exporter = services["exporter"]
    assert ((COMPOSE / exporter["build"]["context"]).resolve() / "Dockerfile").exists()
    assert "EXPOSE 9947" in (ROOT / "Dockerfile").read_text() and "${GPUEFF_PUBLISH_ADDRESS:-127.0.0.1}:9947:9947" in exporter["ports"]
    assert "--demo" in exporter["command"]
    assert gpu["services"]["exporter"]["command"] == [flag for flag in exporter["command"] if flag != "--demo"]
    assert gpu["services"]["exporter"]["deploy"]["resources"]["reservations"]["devices"] == [{"driver": "nvidia", "count": "all", "capabilities": ["gpu"]}]
    assert set(gpu["services"]) == {"exporter"}

    # Prometheus: its config and the shipped rules side by side, scraping the exporter, alerting Alertmanager.
    prometheus = binds(services["prometheus"])
    config_target = next(target for target in prometheus if target.endswith("prometheus.yml"))
    config = load(prometheus[config_target])
    assert f"--config.file={config_target}" in services["prometheus"]["command"]
    folder = config_target.rsplit("/", 1)[0]
    for rule_file in config["rule_files"]:
        assert prometheus[f"{folder}/{rule_file}"] == RULES.resolve()
    assert [target for job in config["scrape_configs"] for group in job["static_configs"] for target in group["targets"]] == ["exporter:9947"]
    assert config["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"] == ["alertmanager:9093"]
    assert "${GPUEFF_PUBLISH_ADDRESS:-127.0.0.1}:9093:9093" in services["alertmanager"]["ports"]
    assert any(flag == f"--config.file={target}" for target in binds(services["alertmanager"]) for flag in services["alertmanager"]["command"])

    # Grafana: the data source is the prometheus service; the provider reads the mounted dashboards.
    grafana = binds(services["grafana"])
    datasource = load(next(source for target, source in grafana.items() if target.startswith("/etc/grafana/provisioning/datasources/")))
    assert datasource["datasources"][0]["url"] == "http://prometheus:9090" and "${GPUEFF_PUBLISH_ADDRESS:-127.0.0.1}:9090:9090" in services["prometheus"]["ports"]
    provider = load(next(source for target, source in grafana.items() if target.startswith("/etc/grafana/provisioning/dashboards/")))
    dashboards_path = provider["providers"][0]["options"]["path"]
    assert grafana[dashboards_path] == DASHBOARDS.resolve() and sorted(DASHBOARDS.glob("*.json"))
    home = services["grafana"]["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert home.startswith(dashboards_path + "/") and (DASHBOARDS / home.rsplit("/", 1)[1]).exists()


def test_the_stack_listens_on_loopback_and_grafanas_admin_has_no_default_password() -> None:
    # Before: 9947, 9090, 9093 and 3000 were published on every interface, with Grafana's admin
    # password admin and Alertmanager's page (silences included) open to anyone who could reach it.
    compose = load(COMPOSE / "compose.yaml")
    with pytest.raises(Unset, match="GRAFANA_ADMIN_PASSWORD: set GRAFANA_ADMIN_PASSWORD to the password"):
        interpolated(compose, {})
    with pytest.raises(Unset):
        interpolated(compose, {"GRAFANA_ADMIN_PASSWORD": ""})  # empty is unset, for :?
    local = interpolated(compose, {"GRAFANA_ADMIN_PASSWORD": "s3cret-from-the-user"})
    assert spec_errors(local) == []
    published = {name: service["ports"] for name, service in local["services"].items()}
    assert published == {"exporter": ["127.0.0.1:9947:9947"], "prometheus": ["127.0.0.1:9090:9090"], "alertmanager": ["127.0.0.1:9093:9093"], "grafana": ["127.0.0.1:3000:3000"]}
    grafana = local["services"]["grafana"]["environment"]
    assert grafana["GF_SECURITY_ADMIN_PASSWORD"] == "s3cret-from-the-user" and grafana["GF_AUTH_ANONYMOUS_ORG_ROLE"] == "Viewer"
    everywhere = interpolated(compose, {"GRAFANA_ADMIN_PASSWORD": "x", "GPUEFF_PUBLISH_ADDRESS": "0.0.0.0"})
    assert [port for service in everywhere["services"].values() for port in service["ports"]] == ["0.0.0.0:9947:9947", "0.0.0.0:9090:9090", "0.0.0.0:9093:9093", "0.0.0.0:3000:3000"]
    text = (COMPOSE / "compose.yaml").read_text()
    assert "admin / admin" not in text and not re.search(r"(?m)^\s*- \"?[0-9]+:[0-9]+", text)  # no port without an address
    assert "/deploy/compose/.env" in (ROOT / ".gitignore").read_text().splitlines()


def test_the_grafana_provisioning_files_follow_grafanas_format() -> None:
    files = {
        COMPOSE / "grafana" / "datasource.yaml": DATASOURCES,
        ROOT / "deploy" / "grafana" / "provisioning" / "datasources" / "gpu-efficiency-prometheus.yaml": DATASOURCES,
        ROOT / "deploy" / "grafana" / "provisioning" / "dashboards" / "gpu-efficiency.yaml": DASHBOARD_PROVIDERS,
    }
    for path, schema in files.items():
        assert problems(load(path), schema) == [], path
    source = load(COMPOSE / "grafana" / "datasource.yaml")
    source["datasources"][0]["jsonData "] = source["datasources"][0].pop("jsonData")  # a key Grafana would silently drop
    source["datasources"].append({**source["datasources"][0], "name": "second", "isDefault": True})
    assert problems(source, DATASOURCES) != []
    source["datasources"][0]["jsonData"] = source["datasources"][0].pop("jsonData ")
    source["datasources"][1]["jsonData"] = source["datasources"][1].pop("jsonData ")
    assert problems(source, DATASOURCES) == ["datasources: 2 default data sources in organisation 1"]


def binary(*names: str) -> str:
    for name in names:
        if found := shutil.which(name):
            return found
    pytest.fail(f"none of {names} is installed: tests/run.sh installs Debian's prometheus and prometheus-alertmanager")


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=PATIENCE) as response:
        return json.loads(response.read())


def wait_for(what: str, check: Callable[[], Any], timeout: float, interval: float = 0.25) -> Any:
    """wait_until, with a server that is not up yet (refused, half an answer) counting as not yet."""
    return wait_until(check, what, timeout, interval, ignoring=(OSError, ValueError, KeyError, IndexError))


@contextlib.contextmanager
def process(command: list[str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("wb") as output:
        running = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT)
    try:
        yield running
    finally:
        running.terminate()
        try:
            running.wait(10)
        except subprocess.TimeoutExpired:
            running.kill()
            running.wait()


def test_the_stacks_prometheus_config_runs_in_debians_prometheus(tmp_path: Path) -> None:
    prometheus_binary, promtool = binary("prometheus"), binary("promtool")
    alertmanager_binary, amtool = binary("prometheus-alertmanager", "alertmanager"), binary("amtool")
    checked = subprocess.run([amtool, "check-config", str(COMPOSE / "alertmanager.yml")], capture_output=True, text=True, timeout=PATIENCE)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    am_port, prom_port = free_port(), free_port()
    with running_daemon("--demo") as exporter, contextlib.ExitStack() as stack:
        # The stack's files laid out as compose mounts them; only the two service addresses differ.
        shipped = (COMPOSE / "prometheus.yml").read_text()
        local = shipped.replace('"exporter:9947"', f'"127.0.0.1:{exporter.port}"').replace('"alertmanager:9093"', f'"127.0.0.1:{am_port}"')
        assert local.count("127.0.0.1:") == 2 and len(local.splitlines()) == len(shipped.splitlines())
        (tmp_path / "prometheus.yml").write_text(local)
        shutil.copy(RULES, tmp_path / "gpu-efficiency-rules.yml")
        checked = subprocess.run([promtool, "check", "config", str(tmp_path / "prometheus.yml")], capture_output=True, text=True, timeout=PATIENCE)
        assert checked.returncode == 0, checked.stdout + checked.stderr

        stack.enter_context(process([alertmanager_binary, f"--config.file={COMPOSE / 'alertmanager.yml'}", f"--storage.path={tmp_path / 'am'}",
                                     f"--web.listen-address=127.0.0.1:{am_port}", "--cluster.listen-address="], tmp_path / "alertmanager.log"))
        stack.enter_context(process([prometheus_binary, f"--config.file={tmp_path / 'prometheus.yml'}", f"--storage.tsdb.path={tmp_path / 'data'}",
                                     f"--web.listen-address=127.0.0.1:{prom_port}"], tmp_path / "prometheus.log"))
        api = f"http://127.0.0.1:{prom_port}/api/v1"
        target = wait_for("the exporter's target to be up", lambda: next((t for t in get_json(f"{api}/targets")["data"]["activeTargets"] if t["health"] == "up"), None), PATIENCE)
        assert target["labels"]["job"] == "gpu-efficiency-exporter"
        wait_for("Alertmanager to be in use", lambda: get_json(f"{api}/alertmanagers")["data"]["activeAlertmanagers"], PATIENCE)

        def evaluated() -> list[dict[str, Any]]:
            """Every rule of the groups on the global interval, once each has been evaluated (the
            hourly rollup group may not have run yet: its rules must only not be in error)."""
            groups = get_json(f"{api}/rules")["data"]["groups"]
            assert [rule["name"] for group in groups for rule in group["rules"] if rule["health"] == "err"] == []
            rules = [rule for group in groups if group["interval"] <= 5 for rule in group["rules"]]
            return rules if rules and all(rule["health"] == "ok" for rule in rules) else []

        wait_for("every rule to be evaluated", evaluated, PATIENCE)
        assert {group["name"] for group in get_json(f"{api}/rules")["data"]["groups"]} == {group["name"] for group in load(RULES)["groups"]}
        # Utilization, recorded from the exporter's counters: one series per demo GPU.
        recorded = "instance_gpu:gpueff_gpu_utilization:ratio_rate5m"
        series = wait_for(f"{recorded} to have data", lambda: get_json(f"{api}/query?query={recorded}")["data"]["result"], PATIENCE)
        assert len(series) == 20 and {each["metric"]["job"] for each in series} == {"gpu-efficiency-exporter"}
