"""Text for a terminal: names from outside made harmless (control and format characters shown as
'?'), and widths counted in the columns a terminal gives the text (``display_width``: a CJK
character takes two), never in characters; cutting and padding by those columns. Pure."""

from __future__ import annotations

import re
import unicodedata

_ESCAPES = re.compile(r"\x1b\[[0-9;]*m")
# C0 and C1 controls, and the invisible format characters that reorder or hide text (bidi overrides
# and isolates, zero-width ones, the BOM; Unicode category Cf, U+00AD aside: terminals show it).
_CONTROLS = re.compile(r"[\x00-\x1f\x7f-\x9f\u061c\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb]")


def printable(text: str) -> str:
    """Text from outside (GPU, trace and app names, URLs, errors) with control and format characters
    shown as '?': an escape sequence in a name must not drive the terminal, nor a bidi override
    reorder a row."""
    return _CONTROLS.sub("?", text)


def char_width(char: str) -> int:
    if unicodedata.combining(char) or unicodedata.category(char) in ("Mn", "Me", "Cf"):
        return 0  # a combining mark or a format character (printable has shown the harmful ones as '?')
    return 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1


def display_width(text: str) -> int:
    """The columns a terminal gives ``text`` (printable's output, no escapes): East Asian wide and
    fullwidth characters (CJK, most emoji) two, combining marks none, the rest one."""
    return len(text) if text.isascii() else sum(char_width(char) for char in text)


def visible_width(line: str) -> int:
    """The columns a line with colour escapes takes."""
    return display_width(_ESCAPES.sub("", line))


def fit(text: str, width: int) -> str:
    """``text`` in at most ``width`` columns: cut with '…' where it is wider."""
    if display_width(text) <= width:
        return text
    kept, used = [], 0
    for char in text:
        used += char_width(char)
        if used > width - 1:
            break
        kept.append(char)
    return "".join(kept) + "…" if width > 0 else ""


def pad(text: str, width: int) -> str:
    """``text`` cut to ``width`` columns and padded to exactly that many (what ``f"{text:<{width}}"`` does by length)."""
    fitted = fit(text, width)
    return fitted + " " * (width - display_width(fitted))


def joined(parts: list[str], width: int) -> list[str]:
    """Parts joined with ' · ', onto as many lines as the width needs, never split inside a part."""
    lines = [parts[0]]
    for part in parts[1:]:
        if display_width(lines[-1]) + 3 + display_width(part) <= width:
            lines[-1] += " · " + part
        else:
            lines.append(part)
    return [fit(line, width) for line in lines]
