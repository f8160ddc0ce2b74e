"""How a pod reaches the API server from inside the fake cluster, as under a real one.

A real API server is served over TLS at ``https://$KUBERNETES_SERVICE_HOST:
$KUBERNETES_SERVICE_PORT`` (the ``kubernetes`` Service's address), and every container gets
its pod's service account credentials at ``/var/run/secrets/kubernetes.io/serviceaccount``
(``token``, ``ca.crt``, ``namespace``: the ``kube-api-access-*`` projected volume that the
ServiceAccount admission plugin adds) unless the pod or its ServiceAccount sets
``automountServiceAccountToken: false``. Here the same API is served a second time, over TLS
with a self-signed certificate (which is its own ``ca.crt``), and answers only requests that
carry a token it issued to a pod (401 otherwise, as a real server's authentication does).
Authorization (RBAC) is not checked: every valid token may do everything.
"""

from __future__ import annotations

import ssl
import subprocess
import threading
import uuid
from http.server import ThreadingHTTPServer
from pathlib import Path

from .server import Handler
from .store import ApiError

MOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"


def _certificate(folder: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and the Service's DNS names."""
    folder.mkdir(parents=True, exist_ok=True)
    cert, key = folder / "ca.crt", folder / "tls.key"
    names = "IP:127.0.0.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"]
        + ["-nodes", "-days", "2", "-subj", "/CN=kube-apiserver", "-addext"]
        + [f"subjectAltName={names}", "-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
    )
    return cert, key


class InClusterApi:
    """The API server as pods reach it: TLS, bearer tokens the cluster issued."""

    def __init__(self, cluster) -> None:
        self.cluster = cluster
        self.tokens: dict[str, tuple[str, str]] = {}  # token -> (namespace, service account)
        self.cert, key = _certificate(cluster.root / "apiserver-tls")
        tokens = self.tokens

        class Authenticated(Handler):
            def _dispatch(self, method: str):
                words = (self.headers.get("Authorization") or "").split(" ", 1)
                if len(words) != 2 or words[0] != "Bearer" or words[1] not in tokens:
                    self._send(401, ApiError(401, "Unauthorized", "Unauthorized").status())
                    return
                super()._dispatch(method)

        handler = type("InClusterHandler", (Authenticated,), {"cluster": cluster})
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.cert, key)
        self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(
            target=self.httpd.serve_forever,
            kwargs={"poll_interval": 0.1},
            name="kube-fake-api-tls",
            daemon=True,
        )

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)

    def service_account_volume(self, pod: dict, folder: Path) -> Path | None:
        """The folder to mount at ``MOUNT`` in the pod's containers, or None where the pod
        or its ServiceAccount turns the token off."""
        spec, ns = pod["spec"], pod["metadata"]["namespace"]
        name = spec.get("serviceAccountName") or "default"
        automount = spec.get("automountServiceAccountToken")
        if automount is None:
            res = self.cluster.registry.find("", "v1", "serviceaccounts")
            account = self.cluster.store.find(res, ns, name) or {}
            automount = account.get("automountServiceAccountToken", True)
        if not automount:
            return None
        token = f"fake-sa.{ns}.{name}.{uuid.uuid4().hex}"
        self.tokens[token] = (ns, name)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "token").write_text(token)
        (folder / "namespace").write_text(ns)
        (folder / "ca.crt").write_bytes(self.cert.read_bytes())
        for path in folder.iterdir():
            path.chmod(0o644)
        return folder
