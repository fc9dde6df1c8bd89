"""An app's answer is read in bounded memory and time: the body streams through a line filter that
keeps only the wanted lines, so 16 MiB of junk lines or one 16 MiB label value (both within the
default max_response_bytes) cost a few MB, not hundreds, and the parse stops at the deadline."""

from __future__ import annotations

import itertools
import tracemalloc
from types import SimpleNamespace

import pytest
from fakes.apps import answer_of, send, serving
from hypothesis import given, settings
from hypothesis import strategies as st
from waiting import PATIENCE

import gpueff.apps.scrape as scrape_module
from gpueff.apps.scrape import MAX_KEPT_BYTES, MAX_LINE_BYTES, Answer, ScrapeError, fetch, read_counter

NAME = "vllm:generation_tokens_total"
SIXTEEN_MIB = 16 * 1024 * 1024
COUNTER = f'# TYPE {NAME} counter\n{NAME}{{model_name="llama"}} 123\n'.encode()


def traced_peak(function) -> tuple[object, int]:
    """What ``function`` returns, and the most memory Python held above the start while it ran."""
    tracemalloc.start()
    try:
        result = function()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def scrape(url: str) -> dict:
    return read_counter(fetch(url, PATIENCE, SIXTEEN_MIB + 4096, [NAME]), NAME, {})


def test_sixteen_mib_of_junk_lines_around_one_counter_costs_a_few_mb() -> None:
    junk = b"ab\n" * ((SIXTEEN_MIB - 2 * len(COUNTER)) // 3)
    body = junk[: len(junk) // 2] + COUNTER + junk[len(junk) // 2 :]
    with serving(lambda handler: send(handler, body)) as url:
        series, peak = traced_peak(lambda: scrape(url))
    assert series == {(("model_name", "llama"),): 123.0}
    assert peak < SIXTEEN_MIB / 8  # the old whole-body read held the body, its text and its split: >300 MB


def test_one_huge_label_value_is_dropped_or_refused_as_it_streams() -> None:
    huge = b'other{label="' + b"v" * SIXTEEN_MIB + b'"} 1\n' + COUNTER
    with serving(lambda handler: send(handler, huge)) as url:
        series, peak = traced_peak(lambda: scrape(url))
    assert series == {(("model_name", "llama"),): 123.0}
    assert peak < SIXTEEN_MIB / 8
    wanted_huge = COUNTER + f'{NAME}{{model_name="'.encode() + b"v" * SIXTEEN_MIB + b'"} 1\n'
    with serving(lambda handler: send(handler, wanted_huge)) as url, pytest.raises(ScrapeError, match=f"a line of {NAME} is over {MAX_LINE_BYTES} bytes"):
        scrape(url)


def test_wanted_lines_are_bounded_in_total() -> None:
    line = f'{NAME}{{model_name="{"m" * 1000}",n="%d"}} 1\n'
    body = "".join(line % n for n in range(MAX_KEPT_BYTES // 1000 + 10))
    with pytest.raises(ScrapeError, match=f"the lines of {NAME} are over {MAX_KEPT_BYTES} bytes"):
        answer_of(body, NAME, chunk=65536)


def test_the_parse_stops_at_the_scrape_deadline(monkeypatch) -> None:
    """The deadline is checked line by line: on a clock that moves one second a reading, a deadline
    100 s away ends the parse at about the 100th of its 10,000 lines, not at the end."""
    body = "".join(f'{NAME}{{n="{n}"}} 1\n' for n in range(10_000))
    kept = answer_of(body, NAME)
    readings = itertools.count()
    monkeypatch.setattr(scrape_module, "time", SimpleNamespace(monotonic=lambda: float(next(readings))))
    late = Answer(kept.wanted, kept.head, kept.lines, deadline=100.0)
    with pytest.raises(ScrapeError, match="no complete answer within scrape_timeout"):
        read_counter(late, NAME, {})
    assert next(readings) <= 102
    assert len(read_counter(kept, NAME, {})) == 10_000


lines = st.sampled_from([f'{NAME}{{a="1"}} 5', f"{NAME} 7", "vllm:generation_tokens 2", f"# TYPE {NAME} counter", "# HELP vllm:generation_tokens x", f"{NAME}_created 1", "vllm:generation_tokensX 1", "vllm_generation_tokens_total 3", "# TYPE vllm_generation_tokens counter", "other 1", "", "# x", "ab"])


@settings(max_examples=200, derandomize=True)
@given(st.lists(lines, max_size=30), st.integers(1, 40), st.booleans())
def test_chunked_filtering_keeps_exactly_the_lines_a_whole_split_would(body_lines, chunk, end_with_newline) -> None:
    body = "\n".join(body_lines) + ("\n" if end_with_newline else "")
    stems = ("vllm_generation_tokens_total", "vllm_generation_tokens")  # either spelling: colons read as underscores
    prefixes = tuple(f"{name}{end}" for name in stems for end in ("{", " ", "\t")) + tuple(f"# {kind} {name} " for name in stems for kind in ("TYPE", "HELP"))
    whole = body.split("\n")
    expected = tuple(line.encode() for line in whole if line.replace(":", "_").startswith(prefixes))
    kept = answer_of(body, NAME, chunk=chunk)
    assert kept.wanted == expected
    assert kept.lines == body.count("\n") + (1 if body and not body.endswith("\n") else 0)
