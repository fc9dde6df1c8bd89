"""Debian's headless Chromium, driven over the DevTools protocol on a pipe (--remote-debugging-pipe:
JSON messages ending in a NUL byte, read on fd 4 and written on fd 3 of the browser), so the tests
need no WebDriver and no websocket client. Flags as on the machines this project runs on: no sandbox
(root), no GPU, no network of its own, a new profile folder."""

from __future__ import annotations

import base64
import fcntl
import json
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from waiting import PATIENCE

CHROMIUM = shutil.which("chromium")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--remote-debugging-pipe",
)


class BrowserError(AssertionError):
    pass


def _above_four(fd: int) -> int:
    moved = fcntl.fcntl(fd, fcntl.F_DUPFD, 10)
    os.set_inheritable(moved, False)  # only the browser gets it, through pass_fds
    os.close(fd)
    return moved


class Browser:
    def __init__(self, profile: Path, width: int = 1400, height: int = 1000) -> None:
        assert CHROMIUM is not None
        to_browser_read, self._to_browser = os.pipe()
        self._from_browser, from_browser_write = os.pipe()
        # The browser's ends go to fds 3 and 4 in bash's exec (dash takes no fd above 9): move them clear of 3 and 4 first.
        to_browser_read, from_browser_write = (_above_four(fd) for fd in (to_browser_read, from_browser_write))
        script = f'exec "$0" "$@" 3<&{to_browser_read} 4>&{from_browser_write} {to_browser_read}<&- {from_browser_write}>&-'
        self.process = subprocess.Popen(
            ["bash", "-c", script, CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "about:blank"],
            pass_fds=(to_browser_read, from_browser_write),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(to_browser_read)
        os.close(from_browser_write)
        self._next_id = 0
        self._answers: dict[int, dict[str, Any]] = {}
        self._arrived = threading.Condition()
        self._reader = threading.Thread(target=self._read, name="chromium-pipe", daemon=True)
        self._reader.start()
        try:
            target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
            self.session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
            self.call("Page.enable", session=self.session)
            self.set_viewport(width, height)
        except BaseException:
            self.close()
            raise

    def set_viewport(self, width: int, height: int) -> None:
        self.call("Emulation.setDeviceMetricsOverride", {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False}, session=self.session)

    def _read(self) -> None:
        pending = b""
        while chunk := os.read(self._from_browser, 1 << 16):
            pending += chunk
            *messages, pending = pending.split(b"\0")
            for raw in messages:
                message = json.loads(raw)
                if "id" in message:
                    with self._arrived:
                        self._answers[message["id"]] = message
                        self._arrived.notify_all()

    def call(self, method: str, params: dict[str, Any] | None = None, session: str | None = None, timeout: float = PATIENCE) -> dict[str, Any]:
        self._next_id += 1
        number = self._next_id
        message: dict[str, Any] = {"id": number, "method": method, "params": params or {}}
        if session is not None:
            message["sessionId"] = session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        with self._arrived:
            while number not in self._answers:
                left = deadline - time.monotonic()
                if left <= 0 or self.process.poll() is not None:
                    raise BrowserError(f"Chromium gave no answer to {method} within {timeout} s")
                self._arrived.wait(min(left, 0.5))
            answer = self._answers.pop(number)
        if "error" in answer:
            raise BrowserError(f"{method}: {answer['error']}")
        result: dict[str, Any] = answer["result"]
        return result

    def navigate(self, url: str) -> None:
        self.call("Page.navigate", {"url": url}, session=self.session)

    def evaluate(self, expression: str) -> Any:
        """The expression's value in the page (JSON-serialisable), awaiting a promise."""
        result = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True}, session=self.session)
        if "exceptionDetails" in result:
            raise BrowserError(f"{expression!r} threw: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout: float = PATIENCE) -> Any:
        """Evaluate until the expression is truthy; its value."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.evaluate(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise BrowserError(f"still false after {timeout} s: {expression}")
            time.sleep(0.1)

    def screenshot(self, path: Path, width: int, height: int) -> None:
        """A PNG of the page's top ``width`` x ``height`` pixels."""
        clip = {"x": 0, "y": 0, "width": width, "height": height, "scale": 1}
        result = self.call("Page.captureScreenshot", {"format": "png", "clip": clip}, session=self.session, timeout=PATIENCE)
        path.write_bytes(base64.b64decode(result["data"]))

    def close(self) -> None:
        try:
            self.call("Browser.close", timeout=5)
        except (BrowserError, OSError, AttributeError):
            pass
        try:
            self.process.wait(5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        os.close(self._to_browser)
        self._reader.join(2)
        os.close(self._from_browser)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
