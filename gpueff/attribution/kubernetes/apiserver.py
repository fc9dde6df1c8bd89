"""Read-only GETs against the Kubernetes API server, in-cluster: the service's address from
KUBERNETES_SERVICE_HOST/PORT, the pod's service-account token (read on every call: it rotates) and
the cluster CA from the service-account folder. Every call has a deadline and a bounded answer; an
answer is JSON, checked to be an object.

Used for what the kubelet's pod-resources API does not tell: which GPU a Dynamic Resource
Allocation device is (its ResourceSlice's ``uuid`` attribute) and the labels of the pods on this
node (copied onto GPU series only where allow-listed).
"""

from __future__ import annotations

import os
import urllib.parse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpueff.deadline import exchange_deadline
from gpueff.untrusted import decode

if TYPE_CHECKING:
    import ssl

# ssl, http.client (with email) and json are imported on the first call: 5 MB of the daemon's
# memory that only a configuration reading the API server needs.

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")


class ApiError(Exception):
    """A call failed; the message says which and why (no token in it)."""


class ApiServer:
    def __init__(self, host: str, port: int, service_account: Path, timeout: float, max_bytes: int) -> None:
        self.host, self.port = host, port
        self.service_account = service_account
        self.timeout = timeout
        self.max_bytes = max_bytes
        self._context: ssl.SSLContext | None = None

    @classmethod
    def in_cluster(cls, service_account: Path, timeout: float, max_bytes: int) -> ApiServer:
        host, port = os.environ.get("KUBERNETES_SERVICE_HOST", ""), os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        if not host or not (port.isascii() and port.isdigit()):
            raise ApiError("not running in a Kubernetes pod: KUBERNETES_SERVICE_HOST/KUBERNETES_SERVICE_PORT are not set")
        return cls(host, int(port), service_account, timeout, max_bytes)

    def _ssl(self) -> ssl.SSLContext:
        import ssl

        if self._context is None:
            try:
                self._context = ssl.create_default_context(cafile=str(self.service_account / "ca.crt"))
            except (OSError, ssl.SSLError) as error:
                raise ApiError(f"cannot load the cluster CA {self.service_account / 'ca.crt'}: {error}") from None
        return self._context

    def get(self, path: str, **query: str) -> dict[str, Any]:
        """GET ``path`` with ``query``; the answer's JSON object."""
        import http.client
        import json

        try:
            token = (self.service_account / "token").read_text(encoding="ascii").strip()
        except (OSError, UnicodeDecodeError) as error:
            raise ApiError(f"cannot read the service-account token: {error}") from None
        target = path + ("?" + urllib.parse.urlencode(query) if query else "")
        connection = http.client.HTTPSConnection(self.host, self.port, timeout=self.timeout, context=self._ssl())
        try:
            with exchange_deadline(connection, self.timeout) as expired:  # the whole call, not each read
                try:
                    connection.request("GET", target, headers={"Authorization": f"Bearer {token}", "Accept": "application/json"})
                    response = connection.getresponse()
                    body = response.read(self.max_bytes + 1)
                except (OSError, http.client.HTTPException) as error:
                    raise ApiError(f"GET {path} failed: {'no whole answer within ' + format(self.timeout, 'g') + ' s' if expired.is_set() else error}") from None
                if expired.is_set():
                    raise ApiError(f"GET {path} failed: no whole answer within {self.timeout:g} s")
        finally:
            connection.close()
        if len(body) > self.max_bytes:
            raise ApiError(f"GET {path}: the answer is over {self.max_bytes} bytes")
        if response.status != 200:
            raise ApiError(f"GET {path} answered HTTP {response.status}: {decode(body, 300)}")
        try:
            answer = json.loads(body)
        except (ValueError, RecursionError) as error:  # RecursionError: arrays nested thousands deep
            raise ApiError(f"GET {path}: not JSON ({type(error).__name__}: {str(error)[:200]})") from None
        if not isinstance(answer, dict):
            raise ApiError(f"GET {path}: not a JSON object")
        return answer
