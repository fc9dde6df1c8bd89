"""What the person at ``top`` chose: the order of the GPUs, the selected one and its detail, the
filter, the scroll position, the help screen and the sort menu; the keys that change it (htop's
and nvitop's habits: F1 help, F3 or F4 or / filter, F6 sort, F10 or q quit), read from the
terminal's bytes; and each GPU's waste over the frames seen. Pure, apart from the clock handed in."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from gpueff.overview import GpuOverview

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
    "memory": (lambda gpu, _: (_value(gpu.memory_used_bytes),), "memory used", True),
    "temperature": (lambda gpu, _: (-300.0 if gpu.temperature_celsius is None else gpu.temperature_celsius,), "temperature", True),
    "index": (lambda gpu, _: (float(gpu.index),), "GPU index", False),
}
SORT_KEYS = {"w": "waste", "u": "utilization", "s": "sm_active", "e": "efficiency", "p": "power", "m": "memory", "t": "temperature", "i": "index"}

# Escape sequences of the keys (xterm, its application mode, the VT220 and rxvt forms; tmux sends these).
SEQUENCES = {
    "\x1b[A": "up", "\x1bOA": "up", "\x1b[B": "down", "\x1bOB": "down", "\x1b[C": "right", "\x1bOC": "right", "\x1b[D": "left", "\x1bOD": "left",
    "\x1b[5~": "page_up", "\x1b[6~": "page_down",
    "\x1b[H": "home", "\x1bOH": "home", "\x1b[1~": "home", "\x1b[7~": "home",
    "\x1b[F": "end", "\x1bOF": "end", "\x1b[4~": "end", "\x1b[8~": "end",
    "\x1bOP": "f1", "\x1b[11~": "f1", "\x1b[[A": "f1", "\x1bOQ": "f2", "\x1b[12~": "f2", "\x1bOR": "f3", "\x1b[13~": "f3", "\x1bOS": "f4", "\x1b[14~": "f4",
    "\x1b[15~": "f5", "\x1b[17~": "f6", "\x1b[18~": "f7", "\x1b[19~": "f8", "\x1b[20~": "f9", "\x1b[21~": "f10",
}
CONTROLS = {"\r": "enter", "\n": "enter", "\x7f": "backspace", "\x08": "backspace", "\t": "tab"}
MOVES = {"k": "up", "j": "down", "b": "page_up", " ": "page_down", "g": "home", "G": "end"}
FILTER_MOST = 64  # characters of a filter


def keys(data: bytes) -> list[str]:
    """The keys in bytes read from the terminal: a printable character as itself, a named key
    ("up", "enter", "escape", "f6", ...), or "other" (a control character or a sequence not read)."""
    text = data.decode("utf-8", errors="replace")
    found: list[str] = []
    at = 0
    while at < len(text):
        if text[at] == "\x1b":
            sequence = next((each for each in SEQUENCES if text.startswith(each, at)), None)
            if sequence is not None:
                found.append(SEQUENCES[sequence])
                at += len(sequence)
                continue
            if at + 1 == len(text) or text[at + 1] == "\x1b":
                found.append("escape")  # the key alone: nothing follows it in the same read
                at += 1
                continue
            at += 1  # a sequence we do not read: skip its introducer, parameters and final byte
            while at < len(text) and text[at] in "[O0123456789;":
                at += 1
            at += 1
            found.append("other")
            continue
        char = text[at]
        found.append(CONTROLS.get(char, "other" if not char.isprintable() else char))
        at += 1
    return found


@dataclass(frozen=True, slots=True)
class View:
    """What the person chose. ``selected`` is a GPU's uuid (it follows the GPU when the order
    changes); "" until an arrow picks one."""

    sort: str = "waste"
    reverse: bool = False  # against the sort's own order
    scroll: int = 0  # lines above the first shown (of the table's rows, or of the detail)
    help: bool = False
    selected: str = ""
    detail: bool = False  # the selected GPU's detail and processes fill the screen
    query: str = ""  # the filter (filtered.py); "" shows every GPU
    editing: bool = False  # the filter's prompt is open: keys are its text
    sorting: bool = False  # the sort menu (F6) is open
    choice: int = 0  # the sort the menu's cursor is on
    done: bool = False  # quit

    @property
    def label(self) -> str:
        return "sorted by " + SORTS[self.sort][1] + (", reversed" if self.reverse else "")

    def after(self, key: str, shown: Sequence[str] = (), page: int = 1) -> View:
        """The view once ``key`` is pressed (keys()'s names). ``shown`` are the uuids of the GPUs
        the screen lists, in its order; ``page`` the rows one screen shows. Any key closes the help."""
        if self.help:
            return replace(self, help=False)
        if key in ("q", "Q", "f10") and not self.editing:
            return replace(self, done=True)
        if self.editing:
            return self._editing(key)
        if self.sorting:
            return self._sorting(key)
        if key in ("h", "?", "f1"):
            return replace(self, help=True)
        if self.detail:
            return self._detail(key, shown, page)
        return self._table(key, shown, page)

    def _editing(self, key: str) -> View:
        if key == "enter":
            return replace(self, editing=False)
        if key == "escape":
            return replace(self, editing=False, query="", scroll=0)
        if key == "backspace":
            return replace(self, query=self.query[:-1], scroll=0)
        if len(key) == 1 and len(self.query) < FILTER_MOST:
            return replace(self, query=self.query + key, scroll=0)
        return self

    def _sorting(self, key: str) -> View:
        names = list(SORTS)
        if key in ("up", "k", "down", "j"):
            return replace(self, choice=(self.choice + (-1 if key in ("up", "k") else 1)) % len(names))
        if key == "enter":
            return replace(self, sort=names[self.choice], reverse=False, scroll=0, sorting=False)
        if key in SORT_KEYS:
            return replace(self, sort=SORT_KEYS[key], reverse=False, scroll=0, sorting=False)
        if key in ("escape", "f6", "left"):
            return replace(self, sorting=False)
        return self

    def _detail(self, key: str, shown: Sequence[str], page: int) -> View:
        if key in ("escape", "enter", "left", "backspace"):
            return replace(self, detail=False, scroll=0)
        moves = {"up": -1, "k": -1, "down": 1, "j": 1, "page_up": -max(1, page - 1), "b": -max(1, page - 1), "page_down": max(1, page - 1), " ": max(1, page - 1), "home": -(1 << 30), "g": -(1 << 30), "end": 1 << 30, "G": 1 << 30}
        if key in moves:
            return replace(self, scroll=max(0, self.scroll + moves[key]))
        if key in ("tab", "n", "p") and shown:  # the next (or previous) GPU's detail
            at = shown.index(self.selected) if self.selected in shown else 0
            return replace(self, selected=shown[(at + (-1 if key == "p" else 1)) % len(shown)], scroll=0)
        return self

    def _table(self, key: str, shown: Sequence[str], page: int) -> View:
        names = list(SORTS)
        key = MOVES.get(key, key)
        steps = {"up": -1, "down": 1, "page_up": -max(1, page - 1), "page_down": max(1, page - 1)}
        if key in steps or key in ("home", "end"):
            if not shown:
                return replace(self, scroll=0 if key == "home" else self.scroll)
            if key == "home":
                return replace(self, selected=shown[0], scroll=0)
            if key == "end":
                return replace(self, selected=shown[-1], scroll=1 << 30)
            if self.selected not in shown:
                return replace(self, selected=shown[0])
            at = min(len(shown) - 1, max(0, shown.index(self.selected) + steps[key]))
            return replace(self, selected=shown[at])
        if key in ("enter", "right"):
            if not shown:
                return self
            return replace(self, selected=self.selected if self.selected in shown else shown[0], detail=True, scroll=0)
        if key in ("/", "f4", "f3"):
            return replace(self, editing=True)
        if key == "escape":
            return replace(self, query="", scroll=0)
        if key == "f6":
            return replace(self, sorting=True, choice=names.index(self.sort))
        if key in SORT_KEYS:
            return replace(self, sort=SORT_KEYS[key], reverse=False, scroll=0)
        if key in ("<", ">"):
            step = 1 if key == ">" else -1
            return replace(self, sort=names[(names.index(self.sort) + step) % len(names)], reverse=False, scroll=0)
        if key == "r":
            return replace(self, reverse=not self.reverse, scroll=0)
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
