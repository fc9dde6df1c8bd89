"""SIGHUP and the keys read only at start (dcgm.*): the warning compares the new file with what
runs (the config the daemon started with), not with the last reload."""

from __future__ import annotations

import logging

from gpueff.backends.replay import ReplayBackend
from gpueff.commands.cli import daemon_parser
from gpueff.commands.daemon import effective_config, reload
from gpueff.poller import Poller
from gpueff.trace import load_trace


class Server:
    def set_web_config(self, web_config) -> None:
        pass


def test_the_restart_warning_says_what_differs_from_what_runs(tmp_path, trace_paths, caplog) -> None:
    config = tmp_path / "config.yml"
    config.write_text("dcgm:\n  host: localhost:5555\n")
    args = daemon_parser().parse_args(["--replay", str(trace_paths["idle"]), "--config", str(config)])
    started = effective_config(args)
    poller = Poller(ReplayBackend([load_trace(trace_paths["idle"])]), started)
    warned = []
    for text in ("dcgm:\n  host: localhost:6666\n", "dcgm:\n  host: localhost:6666\n", "dcgm:\n  host: localhost:5555\n"):
        config.write_text(text)
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            reload(args, poller, Server(), None, started)
        warned.append([record.getMessage() for record in caplog.records if "read only at start" in record.getMessage()])
    changed = ["reload: dcgm.host changed, but it is read only at start: restart the exporter to apply it"]
    assert warned == [changed, changed, []]  # the second still differs from what runs; back to it, nothing to restart for
