"""Finding a DCGM host engine that already runs, before starting an embedded one.

Where the GPU Operator or a systemd unit runs nv-hostengine, an embedded engine inside the exporter is
a second engine on the same GPUs. Before Hopper two engines cannot share the profiling counters: the
later one is refused (DCGM_ST_IN_USE, DCGM_ST_PROFILING_LIBRARY_ERROR) or, starting first, takes
profiling away from the fleet's DCGM (dcgm-exporter issue 7; DCGM's maintainers advise against
several host engines per node, DCGM issue 108). So, without --dcgm.host, the exporter first looks at:

1. ``DCGM_REMOTE_HOSTENGINE_INFO``: dcgm-exporter's setting, which the GPU Operator sets to
   ``nvidia-dcgm:5555`` where it runs its standalone DCGM;
2. ``NVIDIA_DCGM_SERVICE_HOST`` / ``_PORT``: the variables Kubernetes gives pods for the Operator's
   ``nvidia-dcgm`` Service in the same namespace;
3. ``localhost:5555``: nv-hostengine's default port;
4. ``unix:/tmp/nv-hostengine``: the default of nv-hostengine's ``--domain-socket``
   (dcgm_structs.h DCGM_DEFAULT_SOCKET_PATH), only where that file exists.

The first that answers is used. Where the environment names a host engine (1, 2) and none answers, no
embedded engine is started: it would compete with the one the environment says runs.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from exporter.backends.base import BackendUnavailable
from exporter.backends.dcgm.bindings import Bindings
from exporter.backends.dcgm.session import DcgmSession

log = logging.getLogger(__name__)

DEFAULT_PORT = 5555  # nv-hostengine's default TCP port
DEFAULT_SOCKET = "/tmp/nv-hostengine"  # dcgm_structs.h DCGM_DEFAULT_SOCKET_PATH
REMOTE_VARIABLE = "DCGM_REMOTE_HOSTENGINE_INFO"
SERVICE_VARIABLES = ("NVIDIA_DCGM_SERVICE_HOST", "NVIDIA_DCGM_SERVICE_PORT")
PROBE_TIMEOUT = 2.0  # seconds a candidate may take to accept
_ADDRESS = re.compile(r"[A-Za-z0-9._\-]{1,253}(:[0-9]{1,5})?|\[[0-9A-Fa-f:.]{2,45}\](:[0-9]{1,5})?")


@dataclass(frozen=True)
class Candidate:
    address: str  # as --dcgm.host takes it
    source: str  # where it comes from, for the logs
    named: bool  # the environment says a host engine runs there


@dataclass(frozen=True)
class Found:
    address: str | None  # the host engine that answered; None: none did
    tried: tuple[str, ...]  # "address (source): why not" for each that did not
    named: bool  # whether the environment named one (then no embedded engine may start)


def _valid(address: str) -> bool:
    return bool(_ADDRESS.fullmatch(address))


def _with_port(address: str) -> str:
    match = _ADDRESS.fullmatch(address)
    return address if match is not None and (match.group(1) or match.group(2)) else f"{address}:{DEFAULT_PORT}"


def candidates(environ: Mapping[str, str], socket_exists: Callable[[str], bool], socket_path: str = DEFAULT_SOCKET) -> list[Candidate]:
    """Where to look, in order; malformed environment values are logged and left out."""
    out: list[Candidate] = []
    remote = environ.get(REMOTE_VARIABLE, "").strip()
    if remote:
        if _valid(remote):
            out.append(Candidate(_with_port(remote), REMOTE_VARIABLE, True))
        else:
            log.warning("%s is not HOST or HOST:PORT (%r): ignored", REMOTE_VARIABLE, remote[:80])
    host, port = (environ.get(name, "").strip() for name in SERVICE_VARIABLES)
    if host:
        address = f"[{host}]" if ":" in host else host
        port = port or str(DEFAULT_PORT)
        if _valid(f"{address}:{port}"):
            out.append(Candidate(f"{address}:{port}", "the nvidia-dcgm Service", True))
        else:
            log.warning("%s/%s do not form HOST:PORT (%r, %r): ignored", *SERVICE_VARIABLES, host[:80], port[:20])
    out.append(Candidate(f"localhost:{DEFAULT_PORT}", "nv-hostengine's default port", False))
    if socket_exists(socket_path):
        out.append(Candidate(f"unix:{socket_path}", "nv-hostengine's default unix socket", False))
    unique: dict[str, Candidate] = {}
    for each in out:
        unique.setdefault(each.address, each)
    return list(unique.values())


def find(candidates: list[Candidate], refusal: Callable[[str], str | None]) -> Found:
    """The first candidate whose host engine answers; ``refusal(address)`` is None where it does, else why not."""
    tried: list[str] = []
    for each in candidates:
        why = refusal(each.address)
        if why is None:
            return Found(each.address, tuple(tried), any(c.named for c in candidates))
        tried.append(f"{each.address} ({each.source}): {why}")
    return Found(None, tuple(tried), any(c.named for c in candidates))


def find_host_engine(bindings: Bindings, environ: Mapping[str, str], socket_path: str, token: Callable[[], str]) -> str | None:
    """The address of a host engine that answers; None where the embedded engine may start instead.
    Raises BackendUnavailable where the environment names a host engine and none answers."""

    def refusal(address: str) -> str | None:
        probe = DcgmSession(bindings, address, token)
        try:
            probe.init()
            probe.connect(PROBE_TIMEOUT)
        except probe.error as error:
            return probe.error_name(error)
        finally:
            probe.close()
        return None

    found = find(candidates(environ, os.path.exists, socket_path), refusal)
    tried = "; ".join(found.tried) or "nothing"
    if found.address is not None:
        log.info("DCGM: using the running nv-hostengine at %s instead of starting an embedded host engine, which would compete with it for the profiling counters", found.address)
    elif found.named:
        raise BackendUnavailable(
            f"the environment names a DCGM host engine, but none answers ({tried}); not starting an embedded one, which would compete with it for the "
            "profiling counters before Hopper. Pass --dcgm.host, or --dcgm.no-discover for an embedded host engine"
        )
    else:
        log.info("DCGM: no running host engine answers (%s): starting an embedded one", tried)
    return found.address
