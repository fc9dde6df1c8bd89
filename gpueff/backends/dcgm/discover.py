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

3 and 4 are places any local user can take first (a port above 1024, a name in world-writable
/tmp), and the host engine's answers are every GPU's readings: they are trusted only where root (or
the exporter's own user) holds them. Every socket listening on port 5555 of a loopback or wildcard
address (``/proc/net/tcp``, ``tcp6``) must be theirs; the unix socket must be a socket, not a
symbolic link, theirs, in directories theirs that no one else can write to (or, like /tmp, with the
sticky bit, so no one else can rename or remove it). Otherwise it is skipped with a line that says why.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import re
import stat
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from gpueff.backends.base import BackendUnavailable
from gpueff.backends.dcgm.bindings import Bindings
from gpueff.backends.dcgm.session import DcgmSession

log = logging.getLogger(__name__)

DEFAULT_PORT = 5555  # nv-hostengine's default TCP port
DEFAULT_SOCKET = "/tmp/nv-hostengine"  # dcgm_structs.h DCGM_DEFAULT_SOCKET_PATH
REMOTE_VARIABLE = "DCGM_REMOTE_HOSTENGINE_INFO"
SERVICE_VARIABLES = ("NVIDIA_DCGM_SERVICE_HOST", "NVIDIA_DCGM_SERVICE_PORT")
PROBE_TIMEOUT = 2.0  # seconds a candidate may take to accept
MAX_SOCKET_TABLE_BYTES = 64 << 20  # /proc/net/tcp of a node with ~400,000 sockets
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


def candidates(environ: Mapping[str, str], socket_path: str = DEFAULT_SOCKET) -> list[Candidate]:
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
    if os.path.lexists(socket_path):
        out.append(Candidate(f"unix:{socket_path}", "nv-hostengine's default unix socket", False))
    unique: dict[str, Candidate] = {}
    for each in out:
        unique.setdefault(each.address, each)
    return list(unique.values())


def trusted_users() -> set[int]:
    """The users whose sockets and files the exporter takes as its operator's: root and its own."""
    return {0, os.geteuid()}


def socket_refusal(path: str) -> str | None:
    """Why the unix socket at ``path`` is not trusted as a host engine's; None where it is (see the module)."""
    try:
        info = os.lstat(path)
    except OSError as error:
        return f"cannot be checked ({error.strerror})"
    if not stat.S_ISSOCK(info.st_mode):
        return "a symbolic link, not a socket" if stat.S_ISLNK(info.st_mode) else "not a socket"
    if info.st_uid not in trusted_users():
        return f"owned by uid {info.st_uid}, not root"
    directory = os.path.dirname(os.path.abspath(path))
    while True:
        try:
            info = os.lstat(directory)
        except OSError as error:
            return f"its folder {directory} cannot be checked ({error.strerror})"
        if stat.S_ISLNK(info.st_mode):
            return f"its folder {directory} is a symbolic link"
        if info.st_uid not in trusted_users():
            return f"its folder {directory} is owned by uid {info.st_uid}, not root"
        if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not info.st_mode & stat.S_ISVTX:
            return f"its folder {directory} is writable by others without the sticky bit"
        parent = os.path.dirname(directory)
        if parent == directory:
            return None
        directory = parent


def _address(hex_address: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """An address of /proc/net/tcp: 32-bit words in host byte order, in hex."""
    words = [int(hex_address[start : start + 8], 16).to_bytes(4, sys.byteorder) for start in range(0, len(hex_address), 8)]
    return ipaddress.ip_address(b"".join(words))


def _local(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """Whether ``localhost`` can reach a socket bound there: a loopback or wildcard address."""
    mapped = address.ipv4_mapped if isinstance(address, ipaddress.IPv6Address) else None
    return any(each.is_loopback or each.is_unspecified for each in (address, mapped) if each is not None)


def listener_refusal(port: int, proc_net: str = "/proc/net") -> str | None:
    """Why what listens on ``localhost:port`` is not trusted as a host engine; None where every
    socket listening there (IPv4 and IPv6) is root's or this process's user's (with none, the probe
    finds nothing)."""
    owners: set[int] = set()
    for table in ("tcp", "tcp6"):
        path = os.path.join(proc_net, table)
        try:
            with open(path, "rb") as file:
                rows = file.read(MAX_SOCKET_TABLE_BYTES + 1)
        except FileNotFoundError:
            continue  # no IPv6 in this kernel
        except OSError as error:
            return f"{path} cannot be read to see who listens ({error.strerror})"
        if len(rows) > MAX_SOCKET_TABLE_BYTES:
            return f"{path} is over {MAX_SOCKET_TABLE_BYTES} bytes: who listens cannot be checked"
        for row in rows.split(b"\n")[1:]:
            fields = row.split()
            if len(fields) < 8 or fields[3] != b"0A":  # TCP_LISTEN
                continue
            address, _, listening = fields[1].decode("ascii", "replace").partition(":")
            try:
                if int(listening, 16) == port and _local(_address(address)):
                    owners.add(int(fields[7]))
            except ValueError:
                return f"{path} has a row that is not an address and a uid: who listens cannot be checked"
    strangers = sorted(owners - trusted_users())
    return f"a socket listening there is owned by uid {strangers[0]}, not root" if strangers else None


def local_refusal(candidate: Candidate) -> str | None:
    """Why a place any local user could take first (3 and 4 of the module) is not trusted; None where
    root holds it, or the environment named it."""
    if candidate.named:
        return None
    if candidate.address.startswith("unix:"):
        return socket_refusal(candidate.address.removeprefix("unix:"))
    return listener_refusal(DEFAULT_PORT)


def find(candidates: list[Candidate], refusal: Callable[[str], str | None]) -> Found:
    """The first candidate whose host engine answers; ``refusal(address)`` is None where it does, else
    why not. A candidate ``local_refusal`` refuses is skipped without being asked, with a warning."""
    tried: list[str] = []
    for each in candidates:
        why = local_refusal(each)
        if why is not None:
            log.warning("DCGM: not using %s (%s) as the host engine: %s, and any local user could have put it there. Pass --dcgm.host to name a host engine", each.address, each.source, why)
            tried.append(f"{each.address} ({each.source}): not trusted: {why}")
            continue
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

    found = find(candidates(environ, socket_path), refusal)
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
