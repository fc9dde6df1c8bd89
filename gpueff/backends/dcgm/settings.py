"""The ``dcgm:`` config section: where DCGM's bindings are, which host engine to use, and how profiling
is watched. Each key has a ``--dcgm.*`` flag that overrides it; all are read once, at start."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from gpueff.config.engine import RESTART, setting
from gpueff.config.values import absolute_path, boolean, optional, shown

_HOST = re.compile(r"[^\s/]{1,255}")
_UNIX = re.compile(r"unix:/\S{1,4095}")


def host_port(value: Any) -> str:
    if not isinstance(value, str) or not (_HOST.fullmatch(value) or _UNIX.fullmatch(value)):
        raise ValueError(f"expected HOST:PORT of an nv-hostengine such as localhost:5555, or unix:/PATH of its socket, got {shown(value)}")
    return value


@dataclass(frozen=True)
class DcgmConfig:
    """How the DCGM backend (``--backend dcgm``, or ``auto``) reaches DCGM (see docs/dcgm.md)."""

    bindings_path: str | None = setting(None, optional(absolute_path), "folder holding DCGM's Python bindings (default: DCGM 4's, then DCGM 3's install folder); --dcgm.bindings-path overrides it", RESTART)
    host: str | None = setting(None, optional(host_port), "HOST:PORT (or unix:/PATH) of the nv-hostengine to connect to (default: the one the environment names or that answers on localhost, else an embedded host engine); --dcgm.host overrides it", RESTART)
    multi_pass: bool = setting(False, boolean, "before Hopper, watch every profiling field DCGM supports even where that needs several passes; --dcgm.multi-pass sets it", RESTART)
    pause_file: str | None = setting(None, optional(absolute_path), "embedded host engine only: while this file exists, DCGM profiling is paused (for Nsight); --dcgm.pause-file overrides it", RESTART)
    discover: bool = setting(True, boolean, "without a host: use an nv-hostengine found running (named by DCGM_REMOTE_HOSTENGINE_INFO or the GPU Operator's Service, on localhost:5555 or /tmp/nv-hostengine) before starting an embedded one; false starts an embedded one at once; --dcgm.no-discover sets it false", RESTART)
