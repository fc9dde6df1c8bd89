"""Waiting for an event, not for a speed: the suite passes on a busy machine (docs/architecture.md, "Tests").

A test may wait for a condition; it never asserts how fast something happened against a constant.
PATIENCE bounds every wait: a passing test never reaches it, a hang fails at it. Speed targets live
in bench/ scripts that print figures.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from typing import TypeVar

_T = TypeVar("_T")

# Seconds a test waits for something before calling it hung; GPUEFF_TEST_PATIENCE overrides.
PATIENCE = float(os.environ.get("GPUEFF_TEST_PATIENCE", "120"))


def wait_until(check: Callable[[], _T], what: str, timeout: float = PATIENCE, interval: float = 0.05, ignoring: tuple[type[Exception], ...] = ()) -> _T:
    """Call ``check`` until it returns something true, and return that; AssertionError naming
    ``what`` after ``timeout`` seconds. Exceptions of the ``ignoring`` types count as not yet
    (a server still starting refuses connections or answers half a page)."""
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(*ignoring):
            found = check()
            if found:
                return found
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up after {timeout:g} s waiting for {what}")
        time.sleep(interval)
