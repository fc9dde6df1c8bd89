"""Whether the pause file (``--dcgm.pause-file``) asks for a pause, and who may make it.

While the file exists the embedded host engine's profiling is paused for every GPU, so whoever can
create it can hide every GPU's SM activity. A file counts where root or the exporter's user made it,
or where its folder is theirs and no one else may write to it (a group of the operator's choosing
may). In a folder anyone can write to (``/tmp``, sticky or not) another user's file, or a symbolic
link another user planted (``lstat``: never followed), does not count.
"""

from __future__ import annotations

import os
import stat

from gpueff.backends.dcgm.discover import trusted_users


def pause_refusal(path: str) -> str | None:
    """Why the existing file at ``path`` does not count as a request to pause; None where it does."""
    info = os.lstat(path)
    if info.st_uid in trusted_users():
        return None
    folder = os.path.dirname(os.path.abspath(path))
    try:
        holder = os.stat(folder)
    except OSError as error:
        return f"it is owned by uid {info.st_uid} and its folder {folder} cannot be checked ({error.strerror})"
    if holder.st_uid not in trusted_users():
        return f"it is owned by uid {info.st_uid} in {folder}, a folder of uid {holder.st_uid}"
    if holder.st_mode & stat.S_IWOTH:
        return f"it is owned by uid {info.st_uid} in {folder}, which anyone can write to"
    return None


def pause_requested(path: str) -> tuple[bool, str | None]:
    """(pause, None) where the file's presence decides; (False, why) where a file is there that does not count."""
    try:
        refusal = pause_refusal(path)
    except FileNotFoundError:
        return False, None
    except OSError as error:
        return False, f"it cannot be checked ({error.strerror})"
    return refusal is None, refusal
