"""A Kubernetes API server stand-in for tests: HTTPS on 127.0.0.1 with a test CA, answering GETs
from a table of JSON objects by path, checking the service-account bearer token, and recording each
request's path and query. Only the API server cannot exist here; TLS, HTTP and JSON are real."""

from __future__ import annotations

import json
import ssl
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from tls_certs import issue, make_ca

TOKEN = "test-service-account-token"


class FakeApiServer:
    """``answers``: path -> JSON object, raw bytes, or a callable that answers itself given the
    request handler (a hostile server: trickling, malformed) (a missing path answers 404). ``service_account`` is a folder
    with the token and the CA, as Kubernetes mounts it into a pod."""

    def __init__(self, folder: Path, answers: dict[str, Any]) -> None:
        self.answers = answers
        self.requests: list[tuple[str, dict[str, list[str]]]] = []
        self.service_account = folder / "serviceaccount"
        self.service_account.mkdir()
        ca = make_ca(folder, "cluster-ca")
        server = issue(folder, "apiserver", ca, server=True)
        (self.service_account / "ca.crt").write_bytes(ca.cert.read_bytes())
        (self.service_account / "token").write_text(TOKEN + "\n")
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (the http.server API)
                url = urllib.parse.urlsplit(self.path)
                fake.requests.append((url.path, urllib.parse.parse_qs(url.query)))
                if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                    self._answer(401, {"kind": "Status", "code": 401})
                elif callable(fake.answers.get(url.path)):
                    fake.answers[url.path](self)
                elif url.path in fake.answers:
                    self._answer(200, fake.answers[url.path])
                else:
                    self._answer(404, {"kind": "Status", "code": 404})

            def _answer(self, status: int, body: Any) -> None:
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(server.cert, server.key)
        self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def environment(self) -> dict[str, str]:
        return {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(self.port)}

    def __enter__(self) -> FakeApiServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


def resource_slice(driver: str, node: str, pool: str, devices: dict[str, str], version: str = "v1") -> dict[str, Any]:
    """A ResourceSlice of ``driver`` on ``node``: device name -> its uuid attribute (v1beta1 keeps
    attributes under ``basic``)."""
    def device(name: str, uuid: str) -> dict[str, Any]:
        attributes = {"uuid": {"string": uuid}, "type": {"string": "gpu"}, "index": {"int": 0}}
        return {"name": name, "basic": {"attributes": attributes}} if version == "v1beta1" else {"name": name, "attributes": attributes}

    return {"apiVersion": f"resource.k8s.io/{version}", "kind": "ResourceSlice", "metadata": {"name": f"{node}-{driver}-{pool}"},
            "spec": {"driver": driver, "nodeName": node, "pool": {"name": pool, "generation": 1, "resourceSliceCount": 1},
                     "devices": [device(name, uuid) for name, uuid in devices.items()]}}
