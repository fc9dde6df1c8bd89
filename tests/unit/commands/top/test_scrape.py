"""``top --url`` against a hostile or broken server on loopback: labels and reason phrases that carry
terminal escapes, a server that trickles its page, a page as large as top accepts."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator

import pytest
from conftest import ROOT
from waiting import PATIENCE, wait_until

from gpueff.commands.top.scrape import ScrapeError, parse, read
from gpueff.commands.top.table import Frame, render
from unit.commands.top.test_command import TMUX, Tmux

TOP = [sys.executable, "-m", "gpueff", "top"]
GPU = 'gpueff_gpu_info{gpu="0",uuid="GPU-a",model="H100",trace=""} 1\ngpueff_gpu_up{gpu="0",uuid="GPU-a"} 1\n'


@contextlib.contextmanager
def raw_server(answer: Callable[[socket.socket], None]) -> Iterator[str]:
    """A loopback server that reads one request per connection and lets ``answer`` write whatever it likes."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                client, _ = listener.accept()
            except OSError:
                return
            with client:
                client.settimeout(30)
                with contextlib.suppress(OSError):
                    client.recv(65536)
                    answer(client)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        listener.close()


def page(body: str, status: str = "200 OK") -> Callable[[socket.socket], None]:
    data = body.encode()
    return lambda client: client.sendall(f"HTTP/1.1 {status}\r\nContent-Length: {len(data)}\r\nConnection: close\r\n\r\n".encode() + data)


def test_a_bottleneck_class_label_cannot_drive_the_terminal() -> None:
    hostile = GPU + 'gpueff_bottleneck{gpu="0",uuid="GPU-a",class="\x1b]0;TITLE\x07\x1b[2J\x1b[41mX"} 1\n'
    exporter = parse(hostile, "x")
    for colour in (False, True):
        text = "".join(render(Frame(("x",), exporter.gpus, time.time()), 120, None, colour).lines)
        assert "\x1b]" not in text and "\x07" not in text and "\x1b[2J" not in text and "\x1b[41m" not in text
    with raw_server(page(hostile)) as url:
        done = subprocess.run([*TOP, "--url", url, "--once"], cwd=ROOT, capture_output=True, text=True, timeout=PATIENCE)
    assert done.returncode == 0, done.stderr
    assert "\x1b" not in done.stdout and "\x07" not in done.stdout and "?]0;TITLE" in done.stdout


def test_a_reason_phrase_cannot_drive_the_terminal() -> None:
    with raw_server(page("no", status="500 \x1b]0;X\x07\x1b[2J")) as url:
        done = subprocess.run([*TOP, "--url", url, "--once"], cwd=ROOT, capture_output=True, text=True, timeout=PATIENCE)
    assert done.returncode == 1
    assert "answered HTTP 500 ?]0;X??[2J" in done.stderr and "\x1b" not in done.stderr and "\x07" not in done.stderr


def trickle(count: int, pause: float, sent: threading.Event | None = None) -> Callable[[socket.socket], None]:
    """``count`` bytes of page, ``pause`` seconds apart; ``sent`` is set once the last went out."""

    def answer(client: socket.socket) -> None:
        client.sendall(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + GPU.encode())
        for _ in range(count):
            client.sendall(b"#")
            time.sleep(pause)
        if sent is not None:
            sent.set()

    return answer


def test_a_trickling_server_is_cut_off_at_the_timeout_not_only_a_silent_one() -> None:
    # 4,000 bytes, 50 ms apart: each read comes well within the timeout, the whole page (200 s, past
    # any busy machine's lateness; the trickle ends when the fetch hangs up) does not. Before, with
    # "Connection: close" http.client forgot the socket the deadline was to shut down: the fetch
    # read the whole page and only then said it was late.
    sent = threading.Event()
    with raw_server(trickle(4000, 0.05, sent)) as url:
        with pytest.raises(ScrapeError, match=r"did not send its page within 0\.5 s"):
            read(url + "/metrics", 0.5)
        assert not sent.is_set(), "the fetch waited for the whole page"


def test_a_trickled_header_is_cut_off_too() -> None:
    def answer(client: socket.socket) -> None:
        client.sendall(b"HTTP/1.1 200 OK\r\n")
        for _ in range(4000):  # 200 s of headers; they end when the fetch hangs up
            client.sendall(b"X-A: b\r\n")
            time.sleep(0.05)

    with raw_server(answer) as url, pytest.raises(ScrapeError, match="did not send its page within"):
        read(url + "/metrics", 0.5)


@pytest.mark.skipif(TMUX is None, reason="tmux is not installed: tests/run.sh installs it (apt-get install tmux)")
def test_q_quits_while_a_fetch_is_under_way() -> None:
    asked: list[float] = []
    slow_page = trickle(40000, 0.05)  # 2,000 s to come: a top that waited would quit only at its --timeout

    def answer(client: socket.socket) -> None:
        asked.append(time.monotonic())
        slow_page(client)

    with raw_server(answer) as url:
        python = " ".join([sys.executable, "-m", "gpueff", "top", "--url", url, "--timeout", "1m"])
        terminal = Tmux([f"cd {ROOT} &&", python], width=100, height=30)
        try:
            wait_until(lambda: asked, "top's request")
            assert not terminal.dead()
            terminal.tmux("send-keys", "-t", "top", "q")
            wait_until(terminal.dead, "q to quit")
            # Not a speed figure: the order of two events, top's end and its own fetch deadline.
            assert time.monotonic() < asked[0] + 60, "q waited for the fetch's 1 min timeout"
        finally:
            terminal.close()


MiB = 1024 * 1024
LONG = "n" * 250 + "\U0001f600"  # one character outside the BMP: Python keeps the whole string at 4 bytes a character


def padded(lines: list[str], size: int = 16 * MiB - 4096) -> str:
    """The lines, then comment lines up to ``size`` bytes: as large a page as top takes."""
    text = "\n".join(lines) + "\n"
    pad = "#" * 4095 + "\n"
    return text + pad * ((size - len(text.encode())) // len(pad))


def hostile_pages() -> dict[str, tuple[str, str | None]]:
    """Pages of up to 16 MiB, each spreading its samples another way, and what top says of each (None: it reads it)."""
    gpu_info = [f'gpueff_gpu_info{{gpu="{i}",uuid="GPU-{i}",model="H100",trace=""}} 1' for i in range(4096)]
    pods = [f'gpueff_gpu_pod_info{{gpu="{i % 4096}",uuid="GPU-{i % 4096}",namespace="{LONG}",pod="{LONG}{i}",container="{LONG}"}} 1' for i in range(20000)]
    jobs = [f'gpueff_job_gpu_info{{job_kind="ptree",job_id="j{k % 4096}",gpu="{k * 7 % 4096}"}} 1' for k in range(20000)]
    return {
        "a new GPU on every line": (padded([f'gpueff_gpu_up{{gpu="0",uuid="GPU-{i:08d}"}} 1' for i in range(300_000)]), "more than 4096 GPUs"),
        "long names, outside the BMP": ("\n".join(gpu_info + pods), "more than 2097152 characters of names and labels"),
        "the most names top keeps": ("\n".join(gpu_info + pods[:2600]), None),
        "4096 GPUs in 4096 jobs": ("\n".join(gpu_info + jobs), None),
        "one series": ("\n".join(f'gpueff_power_watts{{gpu="0",uuid="GPU-0"}} {i}' for i in range(50001)), "more than 50000 gpueff_ samples"),
        "a line of 16 MiB": ("gpueff_gpu_up{" + "x" * (16 * MiB - 100) + "\n", "a gpueff_ line longer than 64 KiB"),
        "comments only": (padded([]), None),
    }


def test_what_a_page_costs_is_bounded_whatever_it_holds() -> None:
    # The page is read as it comes and never held whole; what top keeps of it is bounded by its
    # GPUs, jobs, apps and the characters of names kept. Before: a 16 MiB page of long names
    # outside the BMP cost 296 MB (the page, its text at 4 bytes a character, its lines and every
    # sample held at once), 16 MiB of tiny GPU lines about 25 bytes per byte of page.
    peaks = {}
    for name, (text, refused) in hostile_pages().items():
        data = text.encode()
        head = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(data)
        with raw_server(lambda client: (client.sendall(head), client.sendall(data))) as url:  # noqa: B023 - used within the loop's turn
            tracemalloc.start()
            try:
                if refused is None:
                    read(url + "/metrics", PATIENCE)
                else:
                    with pytest.raises(ScrapeError, match=refused):
                        read(url + "/metrics", PATIENCE)
                peaks[name] = tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()
    print({name: f"{peak / MiB:.1f} MiB" for name, peak in peaks.items()})
    assert max(peaks.values()) < 24 * MiB, peaks  # names kept: at most 2 Mi characters, 8 MiB
    ours = "".join(f'gpueff_gpu_up{{gpu="0",uuid="GPU-{number}"}} 1\n' for number in range(1000))  # a thousand GPUs still read
    assert parse(ours + "other_metric 1\n", "x").gpus == []  # no gpueff_gpu_info: none shown, nothing refused


def test_a_gpu_index_that_only_looks_like_a_number_is_ignored() -> None:
    # Before: gpu="\u00b2" passed str.isdigit and int() raised ValueError out of parse (top ended
    # with a traceback); gpu="\u0661" was read as GPU 1.
    for index in ("\u00b2", "\u0661", "-1", "1" * 10):
        page_text = GPU + f'gpueff_gpu_info{{gpu="{index}",uuid="GPU-b",model="H100",trace=""}} 1\ngpueff_job_gpu_info{{job_kind="ptree",job_id="j",gpu="{index}"}} 1\n'
        exporter = parse(page_text, "x")
        assert [gpu.uuid for gpu in exporter.gpus] == ["GPU-a"] and [job.gpus for job in exporter.jobs] == [()]


CJK_NAMESPACE = "研究" * 20  # 40 characters, 80 columns


def cjk_page(gpus: int) -> str:
    lines = []
    for index in range(gpus):
        labels = f'gpu="{index}",uuid="GPU-{index}"'
        lines += [f'gpueff_gpu_info{{{labels},model="H100",trace=""}} 1', f"gpueff_gpu_up{{{labels}}} 1"]
        lines.append(f'gpueff_gpu_pod_info{{{labels},namespace="{CJK_NAMESPACE}",pod="e\u0301\U0001f600\u202etrain-{index}",container="c"}} 1')
    return "\n".join(lines) + "\n"


def test_wide_characters_are_measured_by_the_columns_they_take() -> None:
    from gpueff.commands.top.figures import whose
    from gpueff.commands.top.text import display_width, visible_width

    assert [display_width(text) for text in ("abc", "研究", "e\u0301", "\U0001f600", "\uff41", "a\u200bb")] == [3, 4, 1, 2, 2, 2]
    exporter = parse(cjk_page(3), "x")
    for width in (80, 100, 112, 160):
        lines = render(Frame(("x",), exporter.gpus, time.time()), width, None, True).lines
        assert max(visible_width(line) for line in lines) <= width, width
        rows = [line for line in lines if line.startswith("  0 ")]
        assert len(rows) == 1 and "研究" in rows[0] and "…" in rows[0], (width, rows)
    assert whose(exporter.gpus[0]) == CJK_NAMESPACE + "/e\u0301\U0001f600?train-0"  # a right-to-left override shown as '?'


@pytest.mark.skipif(TMUX is None, reason="tmux is not installed: tests/run.sh installs it (apt-get install tmux)")
def test_wide_characters_in_a_pod_name_keep_every_row_on_one_line_and_the_header_on_screen() -> None:
    # Before: widths were len(), so a cell of 22 CJK characters took 44 columns: at 112 columns each
    # row wrapped onto a second line and the rows pushed the title and the table head off the top.
    with raw_server(page(cjk_page(8))) as url:
        python = " ".join([sys.executable, "-m", "gpueff", "top", "--url", url, "--interval", "1h"])
        terminal = Tmux([f"cd {ROOT} &&", python], width=112, height=16)
        try:
            screen = terminal.wait_for(r"(?m)^ +7 ")
            lines = screen.splitlines()
            assert lines[0].startswith("gpu-efficiency-exporter top"), screen
            head = next(number for number, line in enumerate(lines) if line.startswith("GPU UTIL"))
            rows = lines[head + 1 : head + 9]
            assert [row.split()[0] for row in rows] == [str(index) for index in range(8)], screen
            assert all("研究" in row and "…" in row for row in rows), screen
        finally:
            terminal.close()


def lines_run(work: Callable[[], object]) -> int:
    """How many lines of top's own code (gpueff/commands/top, gpueff/overview.py) ``work`` runs:
    a count of the work done that no machine's speed or load changes (sys.settrace)."""
    files = {str(path) for path in (ROOT / "gpueff" / "commands" / "top").glob("*.py")} | {str(ROOT / "gpueff" / "overview.py")}
    counted = 0

    def local(frame, event, arg):  # noqa: ANN001, ANN202 - the settrace protocol
        nonlocal counted
        counted += event == "line"
        return local

    sys.settrace(lambda frame, event, arg: local if frame.f_code.co_filename in files else None)
    try:
        work()
    finally:
        sys.settrace(None)
    return counted


def jobs_page(gpus: int) -> str:
    """``gpus`` GPUs waiting on their peers, in as many two-GPU jobs."""
    lines = []
    for index in range(gpus):
        labels = f'gpu="{index}",uuid="GPU-{index}"'
        lines += [f'gpueff_gpu_info{{{labels},model="H100",trace=""}} 1', f"gpueff_gpu_up{{{labels}}} 1", f'gpueff_bottleneck{{{labels},class="peer_wait"}} 1']
        lines += [f'gpueff_job_gpu_info{{job_kind="ptree",job_id="j{index}",gpu="{gpu}"}} 1' for gpu in (index, (index + 1) % gpus)]
    return "\n".join(lines) + "\n"


def test_a_frames_work_grows_with_the_page_not_with_gpus_times_jobs() -> None:
    # Before, each job scanned every GPU for the ones waiting on a peer: a 3.3 MB page of 24k GPUs
    # in 24k jobs cost 11.4 s of CPU a frame. Counted in lines run, four times the page is four
    # times the work (it was 6.6 times at these sizes, 182,035 lines against 1,208,035, and the
    # gap grows with the page).
    def frame(gpus: int) -> Callable[[], object]:
        text = jobs_page(gpus)
        return lambda: render(Frame(("x",), (exporter := parse(text, "x")).gpus, time.time(), jobs=exporter.jobs), 120, None, False)

    small, large = lines_run(frame(200)), lines_run(frame(800))
    assert large < 4.5 * small, (small, large)
    exporter = parse(jobs_page(4), "x")
    assert [(job.gpus, job.waiting) for job in exporter.jobs] == [((0, 1), (0, 1)), ((1, 2), (1, 2)), ((2, 3), (2, 3)), ((0, 3), (0, 3))]
