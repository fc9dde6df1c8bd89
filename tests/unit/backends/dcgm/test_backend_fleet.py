"""The DCGM backend as DCGM runs in real fleets: a host engine shared with other clients, one found
already running, MIG, the refusals DCGM really gives, one GPU's errors, and the host engine's log.

Each behaviour of DCGM used here is encoded in tests/support/fakes/dcgm with the DCGM source file it follows.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import tempfile
import time
from pathlib import Path

import pytest
from conftest import DCGM_FAKE, running_daemon
from fakes.nvml import FakeClock, FakeGpu, FakeNvml
from waiting import PATIENCE

from gpueff.backends.auto import AutoBackend
from gpueff.backends.base import BackendUnavailable
from gpueff.backends.dcgm.backend import DcgmBackend
from gpueff.backends.dcgm.discover import listener_refusal, socket_refusal
from gpueff.backends.nvml.backend import NvmlBackend
from gpueff.trace import load_trace

FAKE = DCGM_FAKE
ADDRESS = "127.0.0.1:5555"
GPU_I = 4  # dcgm_fields.h DCGM_FE_GPU_I


def backend(host: str | None = ADDRESS, clock=time.monotonic, **options) -> DcgmBackend:
    return DcgmBackend(FAKE, host=host, collect_interval=0.1, slow_interval=1.0, clock=clock, **options)


class OtherClient:
    """Another client of the same host engine (dcgm-exporter, `dcgmi dmon`), through DCGM's own API."""

    def __init__(self, address: str = ADDRESS) -> None:
        import dcgm_agent
        import dcgm_structs

        self.agent, self.structs = dcgm_agent, dcgm_structs
        params = dcgm_structs.c_dcgmConnectV2Params_v2()
        self.handle = dcgm_agent.dcgmConnect_v2(address, params)

    def group(self, name: str, gpu_ids: list[int]):
        group = self.agent.dcgmGroupCreate(self.handle, self.structs.DCGM_GROUP_EMPTY, name)
        for gpu_id in gpu_ids:
            self.agent.dcgmGroupAddEntity(self.handle, group, 1, gpu_id)
        return group

    def watch(self, name: str, gpu_ids: list[int], field_ids: list[int], interval_us: int) -> None:
        field_group = self.agent.dcgmFieldGroupCreate(self.handle, field_ids, name)
        self.agent.dcgmWatchFields(self.handle, self.group(name, gpu_ids), field_group, interval_us, 10.0, 0)

    def close(self) -> None:
        self.agent.dcgmDisconnect(self.handle)


def field_groups_of(engine, name_part: str = "gpueff-") -> int:
    return sum(1 for name, _fields, _owner in engine.field_groups.values() if name_part in name)


# ---- 1. sharing a host engine ------------------------------------------------------------------------


@pytest.mark.parametrize(("kind", "multiplexed"), [("ampere", True), ("hopper", False)])
def test_another_clients_rival_metric_group_is_reported_and_marks_the_gpu_multiplexed(dcgm_engine, caplog, kind, multiplexed):
    """dcgm-exporter watching FP64 (metric group 1.1) beside the exporter's SM activity group (1.0) makes
    DCGM alternate the passes before Hopper, and SM activity reads 0 whenever FP64's pass ran."""
    dcgm_engine.CONTROL.gpu_kinds = [kind, kind]
    engine = dcgm_engine.serve(ADDRESS)
    other = OtherClient()
    other.watch("dcgm-exporter-counters", [0, 1], [1006], 100_000)
    dcgm = backend()
    try:
        with caplog.at_level(logging.WARNING):
            dcgm.start()
        readings = []
        for _ in range(6):
            engine.frozen_us = engine.now_us() + 100_000
            sample = dcgm.collect()[0]
            readings.append(sample.profiling.sm_active)
    finally:
        dcgm.close()
        other.close()
    assert sample.profiling_multiplexed is multiplexed
    assert ("'dcgm-exporter-counters' (metric group 1.1)" in caplog.text) is multiplexed
    if multiplexed:
        assert 0.0 in readings and any(value and value > 0.5 for value in readings), readings


def test_without_a_rival_a_single_pass_gpu_is_not_multiplexed_and_multi_pass_is(dcgm_engine):
    dcgm_engine.CONTROL.gpu_kinds = ["ampere", "ampere"]
    dcgm_engine.serve(ADDRESS)
    one, every = backend(), backend(multi_pass=True)
    try:
        one.start()
        every.start()
        time.sleep(0.15)
        assert one.collect()[0].profiling_multiplexed is False
        assert every.collect()[0].profiling_multiplexed is True
    finally:
        one.close()
        every.close()


def test_two_xids_within_one_poll_count_as_two(dcgm_engine):
    dcgm = backend(host=None)
    dcgm.start()
    try:
        engine = dcgm_engine.CONTROL.embedded[-1]
        dcgm.collect()
        engine.inject_xid(0, 79)
        time.sleep(0.001)
        engine.inject_xid(0, 13)
        sample = dcgm.collect()[0]
        assert sample.xid_errors == {79: 1, 13: 1} and sample.last_xid == 13  # the later one, as DCGM's latest value of field 230
    finally:
        dcgm.close()


# ---- 2. a running host engine first -----------------------------------------------------------------


@pytest.fixture
def short_dir():
    """A folder under /tmp short enough for a unix socket's path (107 bytes at most)."""
    path = Path(tempfile.mkdtemp(prefix="he", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def unix_socket(path: Path) -> socket.socket:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    return listener


def test_a_running_host_engine_on_its_unix_socket_is_used_and_no_embedded_engine_starts(dcgm_engine, short_dir, trace_paths, caplog):
    socket = short_dir / "nv-hostengine"
    unix_socket(socket).close()  # the socket file stays
    dcgm_engine.serve(str(socket))
    dcgm = backend(host=None, discover=True, environ={}, socket_path=str(socket))
    auto = AutoBackend(lambda: dcgm, lambda: NvmlBackend(nvml=FakeNvml([FakeGpu(load_trace(trace_paths["idle"]), gpm=True)])), probe_timeout=PATIENCE)
    with caplog.at_level(logging.INFO):
        auto.start()
    try:
        assert auto.name == "dcgm" and dcgm.host == f"unix:{socket}" and dcgm_engine.CONTROL.embedded == []
        assert f"using the running nv-hostengine at unix:{socket} instead of starting an embedded host engine" in caplog.text
    finally:
        auto.close()


OTHER_UID = 12345  # a user other than root and the exporter's


def planted(kind: str, folder: Path) -> Path:
    """A host engine's socket (or what passes for one) that another user could have put there."""
    path = folder / "nv-hostengine"
    if kind == "a regular file":
        path.touch()
    elif kind == "a symbolic link":
        unix_socket(folder / "elsewhere").close()
        path.symlink_to(folder / "elsewhere")
    else:
        unix_socket(path).close()
    if kind == "another user's socket":
        os.chown(path, OTHER_UID, OTHER_UID)
    elif kind == "a folder anyone can write to":
        folder.chmod(0o777)
    elif kind == "another user's folder":
        os.chown(folder, OTHER_UID, OTHER_UID)
    return path


@pytest.mark.skipif(os.geteuid() != 0, reason="another user's socket is made with chown")
@pytest.mark.parametrize(("kind", "why"), [
    ("a regular file", "not a socket"),
    ("a symbolic link", "a symbolic link, not a socket"),
    ("another user's socket", f"owned by uid {OTHER_UID}, not root"),
    ("a folder anyone can write to", "writable by others without the sticky bit"),
    ("another user's folder", f"is owned by uid {OTHER_UID}, not root"),
])
def test_a_unix_socket_another_user_could_have_planted_is_not_trusted(dcgm_engine, short_dir, caplog, kind, why):
    # Before: any file at /tmp/nv-hostengine (os.path.exists) made the exporter take every GPU's
    # readings from whatever answered there.
    path = planted(kind, short_dir)
    dcgm_engine.serve(str(path))
    dcgm = backend(host=None, discover=True, environ={}, socket_path=str(path))
    with caplog.at_level(logging.INFO):
        dcgm.start()
    dcgm.close()
    assert dcgm.host is None and len(dcgm_engine.CONTROL.embedded) == 1
    warning = next(record.getMessage() for record in caplog.records if record.levelno == logging.WARNING)
    assert f"not using unix:{path} (nv-hostengine's default unix socket) as the host engine: " in warning and why in warning
    assert "Pass --dcgm.host" in warning


def test_a_root_socket_in_a_sticky_folder_anyone_writes_to_is_trusted(short_dir):
    path = planted("root's socket", short_dir)
    short_dir.chmod(0o1777)  # like /tmp: no one else can rename or remove root's socket
    assert socket_refusal(str(path)) is None


def listen_as(uid: int) -> tuple[int, int]:
    """A child process of user ``uid`` listening on 127.0.0.1; its port, and its pid (it ends when killed)."""
    ready_read, ready_write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: only system calls, then _exit
        try:
            os.setuid(uid)
            listener = socket.socket()
            listener.bind(("127.0.0.1", 0))
            listener.listen()
            os.write(ready_write, str(listener.getsockname()[1]).encode())
            while True:
                time.sleep(60)
        finally:
            os._exit(1)
    os.close(ready_write)
    port = int(os.read(ready_read, 16) or b"0")
    os.close(ready_read)
    return port, pid


@pytest.mark.skipif(os.geteuid() != 0, reason="another user's listener needs setuid")
def test_a_port_another_user_listens_on_is_not_trusted(dcgm_engine, short_dir, monkeypatch, caplog):
    # Before: whatever answered on localhost:5555 was taken for nv-hostengine; any user may listen there.
    port, stranger = listen_as(OTHER_UID)
    mine = socket.socket(socket.AF_INET6)
    mine.bind(("::1", 0))
    mine.listen()
    try:
        assert port
        assert listener_refusal(port) == f"a socket listening there is owned by uid {OTHER_UID}, not root"
        assert listener_refusal(mine.getsockname()[1]) is None
        monkeypatch.setattr("gpueff.backends.dcgm.discover.DEFAULT_PORT", port)  # the stranger holds "5555"
        dcgm_engine.serve(f"localhost:{port}")
        dcgm = backend(host=None, discover=True, environ={}, socket_path=str(short_dir / "none"))
        with caplog.at_level(logging.WARNING):
            dcgm.start()
        dcgm.close()
        assert dcgm.host is None and len(dcgm_engine.CONTROL.embedded) == 1
        assert f"not using localhost:{port} (nv-hostengine's default port) as the host engine: a socket listening there is owned by uid {OTHER_UID}" in caplog.text
    finally:
        mine.close()
        os.kill(stranger, signal.SIGKILL)
        os.waitpid(stranger, 0)


def test_a_host_engine_the_environment_names_is_used_and_one_that_does_not_answer_starts_no_embedded_engine(dcgm_engine, tmp_path):
    environ = {"DCGM_REMOTE_HOSTENGINE_INFO": "nvidia-dcgm"}  # as the GPU Operator sets it, here without the port
    missing = str(tmp_path / "no-socket")
    with pytest.raises(BackendUnavailable, match=r"names a DCGM host engine, but none answers \(nvidia-dcgm:5555 \(DCGM_REMOTE_HOSTENGINE_INFO\): DCGM_ST_CONNECTION_NOT_VALID.*not starting an embedded one"):
        backend(host=None, discover=True, environ=environ, socket_path=missing).start()
    assert dcgm_engine.CONTROL.embedded == []
    dcgm_engine.serve("nvidia-dcgm:5555")
    dcgm = backend(host=None, discover=True, environ=environ, socket_path=missing)
    dcgm.start()
    dcgm.close()
    assert dcgm.host == "nvidia-dcgm:5555" and dcgm_engine.CONTROL.embedded == []


def test_with_no_host_engine_running_the_embedded_one_starts_saying_where_it_looked(dcgm_engine, tmp_path, caplog):
    dcgm = backend(host=None, discover=True, environ={}, socket_path=str(tmp_path / "no-socket"))
    with caplog.at_level(logging.INFO):
        dcgm.start()
    dcgm.close()
    assert dcgm.host is None and len(dcgm_engine.CONTROL.embedded) == 1
    assert "no running host engine answers (localhost:5555 (nv-hostengine's default port): DCGM_ST_CONNECTION_NOT_VALID): starting an embedded one" in caplog.text


def test_looking_for_a_running_host_engine_can_be_turned_off_in_the_dcgm_section_or_by_flag(dcgm_engine):
    from gpueff.backends.auto import live_backend
    from gpueff.backends.dcgm.settings import DcgmConfig
    from gpueff.commands.check import parser
    from gpueff.commands.flags import dcgm_settings
    from gpueff.settings import parse_config

    config = parse_config({"dcgm": {"discover": False}})
    assert config.dcgm.discover is False and DcgmConfig().discover is True
    assert live_backend("dcgm", config.dcgm, config.collect_interval, config.slow_collect_interval).discover is False
    assert dcgm_settings(parser().parse_args(["--dcgm.no-discover"]), DcgmConfig()).discover is False
    assert dcgm_settings(parser().parse_args([]), DcgmConfig()).discover is True


# ---- 3. MIG ------------------------------------------------------------------------------------------


def test_an_embedded_engine_as_a_normal_user_does_not_start_while_a_gpu_has_mig_on(dcgm_engine):
    dcgm_engine.CONTROL.mig = {0: 2}
    dcgm_engine.CONTROL.root = False
    with pytest.raises(BackendUnavailable, match="DCGM_ST_INIT_ERROR.*as a normal user while any GPU has MIG on"):
        backend(host=None).start()


def test_xids_on_a_mig_instance_count_on_its_gpu_and_blank_utilization_keeps_the_gpu_up(dcgm_engine, caplog):
    dcgm_engine.CONTROL.mig = {0: 2}
    dcgm = backend(host=None)
    with caplog.at_level(logging.WARNING):
        dcgm.start()
    try:
        engine = dcgm_engine.CONTROL.embedded[-1]
        dcgm.collect()
        engine.inject_xid(0, 43, entity=(GPU_I, 1))  # the driver attributes it to GPU instance 1 of GPU 0
        time.sleep(0.15)
        mig_gpu, other, *_instances = dcgm.collect()
        readings = dcgm.readings()["GPU-fakedcgm-0-matmul_8192"]
    finally:
        dcgm.close()
    assert mig_gpu.xid_errors == {43: 1} and other.xid_errors == {}
    assert "Xid 43 on GPU 0 (GPU-fakedcgm-0-matmul_8192) (GPU instance 1)" in caplog.text
    assert mig_gpu.up and mig_gpu.gpu_utilization is None and readings[203].status == "blank"  # NVML gives none in MIG mode
    assert mig_gpu.power_watts is not None and other.profiling_available


def test_a_mig_gpus_instances_are_devices_of_their_own_with_dcgms_profiling_fields(dcgm_engine):
    """dcgm-exporter reads DCGM_FE_GPU_I entities for MIG GPUs: so does the backend, one device each."""
    dcgm_engine.CONTROL.gpu_kinds = ["ampere", "ampere"]
    dcgm_engine.CONTROL.mig = {0: 2}
    dcgm = backend(host=None)
    devices = dcgm.start()
    try:
        engine = dcgm_engine.CONTROL.embedded[-1]
        assert [d.uuid for d in devices] == ["GPU-fakedcgm-0-matmul_8192", "GPU-fakedcgm-1-idle", "MIG-fakedcgm-0-matmul_8192-0", "MIG-fakedcgm-0-matmul_8192-1"]
        assert devices[2].parent_uuid == "GPU-fakedcgm-0-matmul_8192" and devices[3].gpu_instance_id == 1 and devices[2].index == 0
        assert devices[2].power_limit_watts is None
        # field 50 on a GPU instance is its profile name (DcgmCacheManager.cpp); named as NVML names a MIG device
        assert devices[2].name == "NVIDIA A100-SXM4-80GB MIG 1g.10gb"
        assert 1002 in engine.watched(1) and 1002 not in engine.watched(0)  # GPU 0's profiling is read on its GPU instances
        assert ((GPU_I, 0), 1002) in engine.watches and ((GPU_I, 1), 1002) in engine.watches
        time.sleep(0.15)
        parent, other, first, second = dcgm.collect()
    finally:
        dcgm.close()
    assert parent.up and parent.power_watts is not None and not parent.profiling_available
    assert "MIG mode" in dcgm.profiling["GPU-fakedcgm-0-matmul_8192"].not_supported
    assert first.up and first.profiling_available and second.profiling.sm_active is not None and other.profiling_available
    assert first.power_watts is None and first.xid_errors == {}  # the whole GPU's readings stay on the GPU


def test_a_refused_xid_watch_on_mig_instances_keeps_the_gpus_xids_and_the_connection(dcgm_engine, monkeypatch, caplog):
    import dcgm_agent
    import dcgm_structs

    dcgm_engine.CONTROL.mig = {0: 2}
    real = dcgm_agent.dcgmWatchFields

    def refuse_on_instances(handle, group, field_group, *args):
        engine = dcgm_engine.CONTROL.embedded[-1]
        if any(entity[0] != 1 for entity in engine.groups[group.value][1]):  # an older DCGM, say
            raise dcgm_structs.DCGMError(dcgm_structs.DCGM_ST_NOT_SUPPORTED)
        return real(handle, group, field_group, *args)

    monkeypatch.setattr(dcgm_agent, "dcgmWatchFields", refuse_on_instances)
    dcgm = backend(host=None)
    with caplog.at_level(logging.WARNING):
        dcgm.start()
    try:
        engine = dcgm_engine.CONTROL.embedded[-1]
        dcgm.collect()
        engine.inject_xid(0, 79)
        time.sleep(0.01)
        assert dcgm.collect()[0].xid_errors == {79: 1}
    finally:
        dcgm.close()
    assert "cannot watch Xids on the MIG instances (DCGM_ST_NOT_SUPPORTED)" in caplog.text
    assert len(engine.groups) == 0  # the refused group went too (and the rest at close)


def test_daemon_serves_a_mig_gpus_instances_through_dcgm(trace_paths):
    env = {"FAKE_DCGM_TRACES": str(trace_paths["matmul_8192"]), "FAKE_DCGM_GPUS": "ampere", "FAKE_DCGM_MIG": "0:2"}
    info = 'gpueff_mig_device_info{gpu="0",uuid="MIG-fakedcgm-0-matmul_8192-1",parent_uuid="GPU-fakedcgm-0-matmul_8192",gpu_instance="1"} 1'
    active = 'gpueff_sm_active_ratio{gpu="0",uuid="MIG-fakedcgm-0-matmul_8192-1"}'
    with running_daemon("--backend", "dcgm", "--dcgm.bindings-path", FAKE, "--collect-interval", "100ms", env=env) as daemon:
        deadline = time.monotonic() + PATIENCE
        while not (info in (body := daemon.metrics()) and active in body):
            assert time.monotonic() < deadline, body[-3000:]
            time.sleep(0.1)
    assert 'gpueff_power_watts{gpu="0",uuid="GPU-fakedcgm-0-matmul_8192"}' in body


# ---- 4. the refusals DCGM really gives ---------------------------------------------------------------


def test_a_profiling_module_that_did_not_load_is_refused_once_with_its_hint_in_embedded_mode(dcgm_engine, monkeypatch):
    import dcgm_agent

    dcgm_engine.CONTROL.gpu_kinds = ["ampere", "ampere"]
    dcgm_engine.CONTROL.profiling_module = False  # DCGM 4 without its proprietary package: every profiling call answers MODULE_NOT_LOADED
    asked = []
    real = dcgm_agent.dcgmProfGetSupportedMetricGroups
    monkeypatch.setattr(dcgm_agent, "dcgmProfGetSupportedMetricGroups", lambda *args: asked.append(args) or real(*args))
    clock = FakeClock()
    dcgm = backend(host=None, clock=clock)
    dcgm.start()
    try:
        for _ in range(4):
            clock.now += 1000
            dcgm.collect()
        assert dcgm.errors_total == 0
    finally:
        dcgm.close()
    assert dcgm.profiling_refused.startswith("DCGM_ST_MODULE_NOT_LOADED")
    assert "the exporter itself must run as root" in dcgm.profiling_refused and "datacenter-gpu-manager-4-proprietary" in dcgm.profiling_refused
    assert len(asked) == 2  # once per GPU at start: the module of an embedded engine never loads later


def test_a_shared_engine_without_its_profiling_module_is_asked_again_with_back_off_and_no_field_group_leaks(dcgm_engine, caplog):
    dcgm_engine.CONTROL.gpu_kinds = ["ampere", "ampere"]
    dcgm_engine.CONTROL.profiling_module = False  # DCGM 4 without its proprietary package
    engine = dcgm_engine.serve(ADDRESS)
    clock = FakeClock()
    dcgm = backend(clock=clock)
    with caplog.at_level(logging.INFO):
        dcgm.start()
        try:
            made = (len(engine.groups), len(engine.field_groups))
            assert "again in 60s" in caplog.text and "DCGM_ST_MODULE_NOT_LOADED: DCGM's profiling module did not load" in dcgm.profiling_refused
            clock.now += 61
            dcgm.collect()
            assert "again in 120s" in caplog.text and (len(engine.groups), len(engine.field_groups)) == made
            dcgm_engine.CONTROL.profiling_module = True  # the package installed and nv-hostengine restarted by its operator
            clock.now += 121
            dcgm.collect()
            assert dcgm.errors_total == 0 and dcgm.profiling_refused is None and 1002 in engine.watched(0)
        finally:
            dcgm.close()


@pytest.mark.parametrize(
    ("refusal", "hint"),
    [
        ("DCGM_ST_PROFILING_LIBRARY_ERROR", "another DCGM host engine probably holds the GPU's profiling counters"),
        ("DCGM_ST_INSUFFICIENT_DRIVER_VERSION", "the driver is too old for DCGM profiling, or the nv-hostengine at 127.0.0.1:5555 must run as root"),
    ],
)
def test_refusals_no_smaller_watch_avoids_end_the_attempt_with_their_hint(dcgm_engine, caplog, refusal, hint):
    dcgm_engine.CONTROL.gpu_kinds = ["ampere", "l4"]
    dcgm_engine.CONTROL.profiling_refusal = refusal
    engine = dcgm_engine.serve(ADDRESS)
    clock = FakeClock()
    dcgm = backend(clock=clock)
    with caplog.at_level(logging.INFO):
        dcgm.start()
        try:
            made = (len(engine.groups), len(engine.field_groups))
            for _ in range(3):
                clock.now += 1000
                dcgm.collect()
            assert (len(engine.groups), len(engine.field_groups)) == made and dcgm.errors_total == 0  # every retry destroyed what it made
        finally:
            dcgm.close()
    assert dcgm.profiling_refused.startswith(refusal) and hint in dcgm.profiling_refused
    assert "group by group" not in caplog.text  # no cascade of smaller watches, each a field group made and destroyed


def test_the_host_engines_64_field_groups_used_up_is_a_refusal_tried_again_not_a_lost_engine(dcgm_engine):
    dcgm_engine.CONTROL.gpu_kinds = ["ampere", "ampere"]
    engine = dcgm_engine.serve(ADDRESS)
    other = OtherClient()
    hoarded = [other.agent.dcgmFieldGroupCreate(other.handle, [150], f"other-{n}") for n in range(61)]
    clock = FakeClock()
    dcgm = backend(clock=clock)
    dcgm.start()  # device, slow and Xid field groups fit (64), the profiling one does not
    try:
        assert dcgm.profiling_refused.startswith("DCGM_ST_MAX_LIMIT") and "64 field groups" in dcgm.profiling_refused
        assert all(s.up for s in dcgm.collect()) and dcgm.errors_total == 0
        for field_group in hoarded[:5]:
            other.agent.dcgmFieldGroupDestroy(other.handle, field_group)
        clock.now += 61
        dcgm.collect()
        assert dcgm.profiling_refused is None and 1002 in engine.watched(0)
    finally:
        dcgm.close()
        other.close()


# ---- 5. one GPU's errors ---------------------------------------------------------------------------


def test_a_gpu_lost_before_the_connection_is_down_alone_and_the_others_are_read(dcgm_engine, caplog):
    engine = dcgm_engine.serve(ADDRESS)
    engine.lost.add(1)  # dcgmGroupAddEntity answers DCGM_ST_GPU_IS_LOST for it
    dcgm = backend()
    with caplog.at_level(logging.WARNING):
        dcgm.start()
    try:
        time.sleep(0.25)
        samples = dcgm.collect()
    finally:
        dcgm.close()
    assert [s.up for s in samples] == [True, False] and samples[0].profiling_available and dcgm.errors_total == 0
    assert "GPU 1 (GPU-fakedcgm-1-idle): DCGM reports it lost (DCGM_ST_GPU_IS_LOST)" in caplog.text


def test_the_group_limit_while_trying_profiling_again_is_not_a_lost_host_engine(dcgm_engine):
    dcgm_engine.CONTROL.gpu_kinds = ["ampere", "l4"]  # a profiling group of their own per GPU
    dcgm_engine.CONTROL.profiling_refusal = "DCGM_ST_IN_USE"
    engine = dcgm_engine.serve(ADDRESS)
    clock = FakeClock()
    dcgm = backend(clock=clock)
    dcgm.start()
    other = OtherClient()
    try:
        while len(engine.groups) < dcgm_engine.MAX_GROUPS:  # another client takes every group left
            other.group(f"other-{len(engine.groups)}", [])
        dcgm_engine.CONTROL.profiling_refusal = None
        clock.now += 61
        dcgm.collect()  # the retry's dcgmGroupCreate answers DCGM_ST_MAX_LIMIT
        assert dcgm.errors_total == 0 and dcgm.session.handle is not None
        assert dcgm.profiling_refused.startswith("DCGM_ST_MAX_LIMIT")
    finally:
        dcgm.close()
        other.close()


def test_a_watch_whose_cache_answers_an_error_costs_its_values_not_the_connection(dcgm_engine, monkeypatch, caplog):
    """DcgmApi.cpp helperGetValuesSince ends the call at a field whose cache answers an error other than NO_DATA."""
    import dcgm_agent
    import dcgm_structs

    real = dcgm_agent.dcgmGetValuesSince_v2
    failing = {"on": False}

    def since(handle, group, field_group, *args):
        engine = dcgm_engine.CONTROL.embedded[-1]
        if failing["on"] and 1002 in engine.field_groups[field_group.value][1]:
            raise dcgm_structs.DCGMError(dcgm_structs.DCGM_ST_NOT_SUPPORTED)
        return real(handle, group, field_group, *args)

    monkeypatch.setattr(dcgm_agent, "dcgmGetValuesSince_v2", since)
    dcgm = backend(host=None)
    dcgm.start()
    try:
        time.sleep(0.25)
        assert dcgm.collect()[0].profiling_available
        failing["on"] = True
        with caplog.at_level(logging.WARNING):
            for _ in range(3):
                time.sleep(0.12)
                samples = dcgm.collect()
        failing["on"] = False
        time.sleep(0.12)
        back = dcgm.collect()
    finally:
        dcgm.close()
    assert all(s.up for s in samples) and dcgm.errors_total == 0 and "lost DCGM" not in caplog.text
    assert caplog.text.count("DCGM answered DCGM_ST_NOT_SUPPORTED reading fields") == 1
    assert back[0].profiling_available


# ---- 6. the shared engine's log ----------------------------------------------------------------------


def test_polls_read_only_watched_fields_with_data_so_the_host_engine_logs_nothing(dcgm_engine):
    """DCGM 3.3.8 logs every non-OK latest value at ERROR, DCGM_ST_NO_DATA included (DcgmCacheManager.cpp)."""
    dcgm_engine.CONTROL.naming = "3"
    dcgm_engine.CONTROL.gpu_kinds = ["hopper", "pascal"]  # profiling fields watched on GPU 0 only; no Xid yet anywhere
    engine = dcgm_engine.serve(ADDRESS)
    dcgm = backend()
    dcgm.start()
    try:
        for _ in range(5):
            time.sleep(0.05)
            samples = dcgm.collect()
    finally:
        dcgm.close()
    assert all(s.up for s in samples) and samples[0].profiling_available
    assert engine.log == []


# ---- 7. smaller points -------------------------------------------------------------------------------


def test_pausing_that_dcgm_cannot_do_on_a_gpm_only_host_is_asked_once(dcgm_engine, tmp_path, monkeypatch, caplog):
    import dcgm_agent

    pause = tmp_path / "pause"
    pause.touch()
    calls = []
    real = dcgm_agent.dcgmProfPause
    monkeypatch.setattr(dcgm_agent, "dcgmProfPause", lambda handle: calls.append(handle) or real(handle))
    dcgm = backend(host=None, pause_file=str(pause))
    dcgm.start()
    try:
        with caplog.at_level(logging.WARNING):
            for _ in range(4):
                assert all(s.up for s in dcgm.collect())
    finally:
        dcgm.close()
    assert len(calls) == 1 and caplog.text.count("DCGM cannot pause profiling here (DCGM_ST_NOT_SUPPORTED") == 1


def test_field_ids_are_looked_up_after_dcgm_is_initialised_so_the_lookup_decides(dcgm_engine, monkeypatch):
    import dcgm_fields
    import dcgm_structs

    monkeypatch.setattr(dcgm_structs, "dcgmLib", None)  # a fresh process: libdcgm not loaded yet
    dcgm_engine.CONTROL.known_field_ids = set(dcgm_fields.FIELD_NAMES) - {1016}  # the bindings name 1016; this DCGM has no metadata for it
    dcgm = backend(host=None)
    dcgm.start()
    dcgm.close()
    assert [spec.field_id for spec in dcgm.unknown_fields] == [1016]


def test_an_unknown_chip_architecture_arrives_as_minus_one_and_the_compute_capability_decides(dcgm_engine):
    dcgm_engine.CONTROL.gpu_kinds = ["unknown-architecture", "unknown-architecture"]  # compute capability 10.0
    dcgm = backend(host=None)
    dcgm.start()
    dcgm.close()
    assert dcgm.profiling["GPU-fakedcgm-0-matmul_8192"].one_pass_limited is False


def test_a_watch_is_ended_before_its_field_group_is_destroyed(dcgm_engine):
    """DcgmFieldGroup.cpp RemoveFieldGroup leaves the field group's watches running."""
    engine = dcgm_engine.serve(ADDRESS)
    dcgm = backend()
    dcgm.start()
    try:
        session = dcgm.session
        watch = next(each for each in session._watches if 1002 in each.field_ids)
        session.unwatch(watch)
        assert 1002 not in engine.watched(0) and 203 in engine.watched(0)
    finally:
        dcgm.close()


def test_a_non_root_embedded_engine_lists_metric_groups_is_refused_the_watch_and_not_asked_again(dcgm_engine, monkeypatch):
    """NVIDIA's test_prof.py test_dcgm_prof_requires_root_privileges: as a normal user the metric-group
    query answers and the watch answers DCGM_ST_REQUIRES_ROOT. An embedded engine runs as the exporter's
    own user, which does not change while it runs: asking again every 16 min would only log and churn."""
    import dcgm_agent

    dcgm_engine.CONTROL.gpu_kinds = ["ampere", "ampere"]
    dcgm_engine.CONTROL.root = False
    watches = []
    real = dcgm_agent.dcgmWatchFields
    monkeypatch.setattr(dcgm_agent, "dcgmWatchFields", lambda *args: watches.append(args) or real(*args))
    clock = FakeClock()
    dcgm = backend(host=None, clock=clock)
    dcgm.start()
    try:
        support = dcgm.profiling["GPU-fakedcgm-0-matmul_8192"]
        assert support.supported and support.not_supported is None  # the query answered
        assert dcgm.profiling_refused.startswith("DCGM_ST_REQUIRES_ROOT")
        tried = len(watches)
        for _ in range(4):
            clock.now += 1000
            dcgm.collect()
        assert len(watches) == tried and dcgm.errors_total == 0
    finally:
        dcgm.close()


def test_hopper_gpus_read_profiling_through_gpm_without_root(dcgm_engine):
    """test_prof.py: GPM-enabled GPUs do not use the profiling module and need no root."""
    dcgm_engine.CONTROL.root = False
    dcgm = backend(host=None)
    dcgm.start()
    try:
        assert dcgm.profiling_refused is None and dcgm.profiling_answers(3.0)
    finally:
        dcgm.close()
