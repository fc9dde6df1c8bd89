"""Text made by someone else: process names, cgroup paths, strings from the GPU driver; and the
files an operator names (configs, traces), read bounded and only where they are regular files.

Any process on the node can name itself with arbitrary bytes (``prctl(PR_SET_NAME)``) and any
cgroup manager can create directories with them, so none of it is assumed to be UTF-8: bytes that
are not are kept as ``\\xNN`` escapes (two different names stay two different names), and every
read is bounded in length. Nothing here raises on content; reading raises ``OSError`` only.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

MAX_STRING_BYTES = 4096  # a driver string or a path: NVML's process name buffer is 1,024 bytes
MAX_PROC_FILE_BYTES = 65536  # /proc/<pid>/cgroup: one line per v1 hierarchy, each path at most 4,096 bytes
# C0 controls (tab included), DEL, C1 controls, and the line and paragraph separators.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def decode(raw: bytes | bytearray | memoryview, max_bytes: int = MAX_STRING_BYTES) -> str:
    """The first ``max_bytes`` bytes as text, bytes that are not UTF-8 escaped as ``\\xNN``."""
    return bytes(raw[:max_bytes]).decode("utf-8", errors="backslashreplace")


def whole_number(text: str, digits: int) -> int | None:
    """``text`` as a number where it is 1 to ``digits`` ASCII digits, else None. (``str.isdigit``
    alone also passes '²', which ``int`` refuses, and '١٢', which ``int`` reads as 12.)"""
    return int(text) if 0 < len(text) <= digits and text.isascii() and text.isdigit() else None


def read_text(path: Path, max_bytes: int = MAX_PROC_FILE_BYTES) -> str:
    """A small file's first ``max_bytes`` bytes, decoded as ``decode`` does; raises OSError only."""
    with open(path, "rb") as file:
        return decode(file.read(max_bytes), max_bytes)


def read_lines(path: Path, max_bytes: int = MAX_PROC_FILE_BYTES) -> list[str] | None:
    """The lines of a /proc or cgroup file, read as ``read_text`` does and split at ``\\n`` only, the
    kernel's separator (``str.splitlines`` also splits at ``\\r``, ``\\v``, ``\\f``, ``\\x1c``-``\\x1e``,
    U+0085, U+2028 and U+2029, all of which a cgroup name may hold: ``x\\r0::/kubepods/pod<other>``
    would read as a line of its own). None where any line holds a control character: the file is
    suspect and nothing in it is attributable. Raises OSError only."""
    found = read_text(path, max_bytes).split("\n")
    if found[-1] == "":
        found.pop()
    return None if any(_CONTROL.search(line) for line in found) else found


def writable_by_others(path: str | Path) -> str | None:
    """Why a user other than the file's owner (and root) could change what ``path`` holds, where the
    daemon would take it as its operator's word; None where no one else can. Another user can where
    anyone may write the file, where a stranger's file (or symbolic link) sits in a folder anyone may
    write to (``/tmp``: its sticky bit keeps others from replacing a file, not from making one first),
    or where a folder on the file's real path is writable by anyone without the sticky bit (anyone
    may replace the file). A file on a read-only file system (a Kubernetes ConfigMap) is no one's to
    change. Raises OSError where the file cannot be checked."""
    trusted = {0, os.geteuid()}
    given = os.path.abspath(path)
    link = os.lstat(given)
    if stat.S_ISLNK(link.st_mode) and link.st_uid not in trusted and os.stat(os.path.dirname(given)).st_mode & stat.S_IWOTH:
        return f"it is a symbolic link of uid {link.st_uid} in {os.path.dirname(given)}, a folder anyone can write to"
    real = os.path.realpath(given)
    if os.statvfs(real).f_flag & os.ST_RDONLY:
        return None
    info = os.stat(real)
    if info.st_mode & stat.S_IWOTH:
        return f"anyone can write to {real} (chmod o-w)"
    folder = os.path.dirname(real)
    if info.st_uid not in trusted and os.stat(folder).st_mode & stat.S_IWOTH:
        return f"{real} is owned by uid {info.st_uid} in {folder}, a folder anyone can write to"
    while True:
        mode = os.stat(folder).st_mode
        if mode & stat.S_IWOTH and not mode & stat.S_ISVTX:
            return f"anyone can replace it: its folder {folder} is writable by anyone, without the sticky bit"
        parent = os.path.dirname(folder)
        if parent == folder:
            return None
        folder = parent


def read_file(path: str | Path, max_bytes: int) -> bytes:
    """A regular file's bytes, at most ``max_bytes``. Raises OSError where it cannot be read, and
    ValueError (saying why) where it is not a regular file or is larger: the size is checked
    before reading, and a FIFO or device is refused without waiting for a writer (opened
    non-blocking), so a reload never blocks the daemon or its shutdown."""
    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(descriptor, "rb") as file:
        info = os.fstat(descriptor)
        if not stat.S_ISREG(info.st_mode):
            raise ValueError("not a regular file (a FIFO, device or directory is refused)")
        if info.st_size > max_bytes:
            raise ValueError(f"{info.st_size} bytes is over the {max_bytes} byte limit")
        data = file.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise ValueError(f"over the {max_bytes} byte limit")
    return data
