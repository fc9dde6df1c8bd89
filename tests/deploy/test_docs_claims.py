"""What the security and Kubernetes docs claim about the Kubernetes API, against what the code does:
the config keys that make API server calls must be named as such, and no page may say the exporter
never talks to the API."""

from __future__ import annotations

import re
from pathlib import Path

from repo import ROOT

from gpueff.attribution.kubernetes import attribution


def test_the_docs_say_which_keys_talk_to_the_kubernetes_api() -> None:
    source = Path(attribution.__file__).read_text()
    assert "ApiServer.in_cluster" in source and "dra_drivers" in source and "pod_label_keys" in source  # the code does call it
    for page in ("docs/security.md", "docs/kubernetes.md"):
        text = re.sub(r"\s+", " ", (ROOT / page).read_text())
        assert not re.search(r"never talks to the Kubernetes API(?! unless)", text), page
        assert "no Role and no token |" not in text, page  # the ServiceAccount row must name the exception
    security = re.sub(r"\s+", " ", (ROOT / "docs/security.md").read_text())
    row = next(line for line in (ROOT / "docs/security.md").read_text().splitlines() if line.startswith("| DRA GPUs"))
    assert "`kubernetes.dra_drivers`" in row and "`kubernetes.pod_label_keys`" in row and "service-account token" in row and "`list`" in row
    assert "cannot narrow `list` to a node" in security
