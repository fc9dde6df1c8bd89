"""What the person at ``top`` chose: the order of the GPUs, the scroll position, the help screen;
the keys that change it (htop's and nvitop's habits), read from the terminal's bytes; and each
GPU's waste over the frames seen. Pure, apart from the clock handed in."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from exporter.overview import GpuOverview

WASTE_WINDOW = 600.0  # seconds: WASTE is the GPU time busy while the SMs idled over the last ten minutes
WASTE_STEP = 1.0  # seconds between two readings kept (faster frames replace the newest)


def _gap(gpu: GpuOverview) -> float:
    """The share of this moment's time the GPU is busy while its SMs idle."""
    return max(0.0, gpu.utilization - gpu.sm_active) if gpu.utilization is not None and gpu.sm_active is not None else 0.0


def _value(value: float | None) -> float:
    return -1.0 if value is None else value


# Sort name -> (key, label, the order it starts in: True for most first)
SortKey = Callable[[GpuOverview, Mapping[str, float]], tuple[float, ...]]
SORTS: dict[str, tuple[SortKey, str, bool]] = {
    "waste": (lambda gpu, waste: (waste.get(gpu.uuid, 0.0), _value(gpu.busy_idle_sm_seconds), _gap(gpu)), "waste", True),
    "utilization": (lambda gpu, _: (_value(gpu.utilization),), "utilization", True),
    "sm_active": (lambda gpu, _: (_value(gpu.sm_active),), "SM activity", True),
    "efficiency": (lambda gpu, _: (2.0 if gpu.efficiency is None else gpu.efficiency,), "efficiency", False),
    "power": (lambda gpu, _: (_value(gpu.power_watts),), "power", True),
    "index": (lambda gpu, _: (float(gpu.index),), "GPU index", False),
}
SORT_KEYS = {"w": "waste", "u": "utilization", "s": "sm_active", "e": "efficiency", "p": "power", "i": "index"}

# Escape sequences of the keys that move (xterm, its application mode, the VT220 forms; tmux sends these).
SEQUENCES = {
    "\x1b[A": "up", "\x1bOA": "up", "\x1b[B": "down", "\x1bOB": "down",
    "\x1b[5~": "page_up", "\x1b[6~": "page_down",
    "\x1b[H": "home", "\x1bOH": "home", "\x1b[1~": "home", "\x1b[7~": "home",
    "\x1b[F": "end", "\x1bOF": "end", "\x1b[4~": "end", "\x1b[8~": "end",
}
LETTERS = {"k": "up", "j": "down", "b": "page_up", " ": "page_down", "g": "home", "G": "end", "q": "quit", "Q": "quit", "h": "help", "?": "help", "r": "reverse", "<": "previous_sort", ">": "next_sort"}


def keys(data: bytes) -> list[str]:
    """The keys in bytes read from the terminal: a letter's action, a sort's name, a moving key's
    name, or "other" (it only closes the help)."""
    text = data.decode("latin-1")
    found: list[str] = []
    at = 0
    while at < len(text):
        if text[at] == "\x1b":
            sequence = next((each for each in SEQUENCES if text.startswith(each, at)), None)
            if sequence is not None:
                found.append(SEQUENCES[sequence])
                at += len(sequence)
                continue
            at += 1  # an escape alone, or a sequence we do not read: skip its introducer and final byte
            while at < len(text) and text[at] in "[O0123456789;":
                at += 1
            at += 1
            found.append("other")
            continue
        char = text[at]
        found.append("sort:" + SORT_KEYS[char] if char in SORT_KEYS else LETTERS.get(char, "other"))
        at += 1
    return found


@dataclass(frozen=True, slots=True)
class View:
    sort: str = "waste"
    reverse: bool = False  # against the sort's own order
    scroll: int = 0  # table rows above the first shown
    help: bool = False

    @property
    def label(self) -> str:
        return "sorted by " + SORTS[self.sort][1] + (", reversed" if self.reverse else "")

    def after(self, key: str, page: int) -> View:
        """The view once ``key`` is pressed; ``page`` is the number of rows a screen shows. Any key closes the help."""
        if self.help:
            return replace(self, help=False)
        names = list(SORTS)
        moves = {"up": -1, "down": 1, "page_up": -max(1, page - 1), "page_down": max(1, page - 1), "home": -(1 << 30), "end": 1 << 30}
        if key in moves:
            return replace(self, scroll=max(0, self.scroll + moves[key]))
        if key.startswith("sort:"):
            return replace(self, sort=key.removeprefix("sort:"), reverse=False, scroll=0)
        if key in ("previous_sort", "next_sort"):
            step = 1 if key == "next_sort" else -1
            return replace(self, sort=names[(names.index(self.sort) + step) % len(names)], reverse=False, scroll=0)
        if key == "reverse":
            return replace(self, reverse=not self.reverse, scroll=0)
        if key == "help":
            return replace(self, help=True)
        return self


def ordered(gpus: Iterable[GpuOverview], waste: Mapping[str, float], sort: str = "waste", reverse: bool = False) -> list[GpuOverview]:
    """The GPUs in the sort's order (ties by index)."""
    key, _, most_first = SORTS[sort]
    descending = most_first != reverse
    by_index = sorted(gpus, key=lambda gpu: gpu.index)
    return sorted(by_index, key=lambda gpu: key(gpu, waste), reverse=descending)


class WasteWindow:
    """Each GPU's GPU-seconds busy while its SMs idled over the last ``window`` seconds of frames:
    how much its counter (``gpueff_busy_idle_sm_seconds_total``) grew between the oldest reading
    kept and the newest. Until two frames are seen, a GPU has no figure."""

    def __init__(self, window: float = WASTE_WINDOW, step: float = WASTE_STEP) -> None:
        self.window = window
        self.step = step
        self._readings: dict[str, deque[tuple[float, float]]] = {}

    def add(self, gpus: Sequence[GpuOverview], now: float) -> dict[str, float]:
        waste: dict[str, float] = {}
        for gpu in gpus:
            total = gpu.busy_idle_sm_seconds
            if total is None:
                continue
            readings = self._readings.setdefault(gpu.uuid, deque())
            if readings and total < readings[-1][1]:
                readings.clear()  # the counter began again: the exporter restarted
            if len(readings) > 1 and readings[-1][0] - readings[-2][0] < self.step:  # the newest is too close to the one before: replaced
                readings[-1] = (now, total)
            else:
                readings.append((now, total))
            while len(readings) > 2 and readings[1][0] <= now - self.window:
                readings.popleft()
            if len(readings) > 1:
                waste[gpu.uuid] = readings[-1][1] - readings[0][1]
        for gone in set(self._readings) - {gpu.uuid for gpu in gpus}:
            del self._readings[gone]
        return waste
