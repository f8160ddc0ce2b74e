"""The HTTP side of the fake API server: discovery, REST verbs, watch and log streams."""

from __future__ import annotations

import json
import threading
import time
import traceback
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import yaml

from . import patch as patches
from .kueue import VISIBILITY_GROUP, pending_summary
from .store import ApiError, not_found
from .validation import validate_object

VERSION = {"major": "1", "minor": "37", "gitVersion": "v1.37.0-fake", "platform": "linux/amd64"}


def _route(registry, path: str):
    """(resource, namespace, name, subresource) for a resource path, or None."""
    parts = [p for p in path.split("/") if p]
    if parts[:2] == ["api", "v1"]:
        group, version, rest = "", "v1", parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    ns = None
    if len(rest) >= 3 and rest[0] == "namespaces":
        ns, rest = rest[1], rest[2:]
    if not rest:
        return None
    res = registry.find(group, version, rest[0])
    if res is None:
        return None
    if not res.namespaced and ns is not None:
        return None
    name = rest[1] if len(rest) > 1 else None
    sub = rest[2] if len(rest) > 2 else None
    return res, ns, name, sub


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    cluster = None  # set on the subclass made for each server

    def log_message(self, *args):
        pass

    # -- plumbing
    def _send(self, code: int, body: dict):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self):
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if not raw:
            return {}
        ctype = self.headers.get("Content-Type", "")
        try:
            return yaml.safe_load(raw) if "yaml" in ctype else json.loads(raw)
        except ValueError as exc:
            raise ApiError(
                400, "BadRequest", f"the body of the request could not be decoded: {exc}"
            )

    def _start_stream(self, ctype: str):
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def _chunk(self, data: bytes):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _end_stream(self):
        try:
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except OSError:
            pass

    def _dispatch(self, method: str):
        url = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        try:
            self._handle(method, url.path.rstrip("/") or "/", query)
        except ApiError as exc:
            self._send(exc.code, exc.status())
        except (BrokenPipeError, ConnectionResetError):
            pass
        except Exception:  # a fault of the fake: answer 500 and keep it for the test to see
            self.cluster.errors.append(f"{method} {self.path}\n{traceback.format_exc()}")
            self._send(500, ApiError(500, "InternalError", "fake API server fault").status())

    def do_GET(self):
        self._dispatch("GET")

    def do_POST(self):
        self._dispatch("POST")

    def do_PUT(self):
        self._dispatch("PUT")

    def do_PATCH(self):
        self._dispatch("PATCH")

    def do_DELETE(self):
        self._dispatch("DELETE")

    # -- the API
    def _handle(self, method: str, path: str, query: dict):
        cluster = self.cluster
        reg = cluster.registry
        if method == "GET":
            discovery = self._discovery(reg, path)
            if discovery is not None:
                return self._send(200, discovery)
        parts = path.strip("/").split("/")
        if (
            method == "GET"
            and cluster.kueue is not None
            and len(parts) == 8
            and parts[1] == VISIBILITY_GROUP
            and parts[3] == "namespaces"
            and parts[5] == "localqueues"
            and parts[7] == "pendingworkloads"
        ):
            return self._send(200, pending_summary(cluster.kueue, parts[4], parts[6]))
        route = _route(reg, path)
        if route is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource", {})
        res, ns, name, sub = route
        store = cluster.store
        if (
            ns is not None
            and not store.find(reg.find("", "v1", "namespaces"), None, ns)
            and not (method == "GET" and name is None)
        ):
            raise ApiError(
                404, "NotFound", f'namespaces "{ns}" not found', {"name": ns, "kind": "namespaces"}
            )
        if name is None:
            if method == "GET" and query.get("watch") in ("true", "1"):
                return self._watch(res, ns, query)
            if method == "GET":
                items, rv = store.list(
                    res, ns, query.get("labelSelector"), query.get("fieldSelector")
                )
                return self._send(
                    200,
                    {
                        "kind": f"{res.kind}List",
                        "apiVersion": res.api_version,
                        "metadata": {"resourceVersion": rv},
                        "items": items,
                    },
                )
            if method == "POST":
                return self._create(res, ns, self._body(), query)
            if method == "DELETE":
                body = self._body()
                items, rv = store.list(
                    res, ns, query.get("labelSelector"), query.get("fieldSelector")
                )
                for item in items:
                    cluster.delete(
                        res,
                        item["metadata"].get("namespace"),
                        item["metadata"]["name"],
                        *self._delete_options(body, query),
                    )
                return self._send(
                    200,
                    {
                        "kind": f"{res.kind}List",
                        "apiVersion": res.api_version,
                        "metadata": {"resourceVersion": rv},
                        "items": items,
                    },
                )
            raise ApiError(405, "MethodNotAllowed", f"{method} is not supported on {path}")
        if sub == "log" and res.kind == "Pod" and method == "GET":
            return self._log(ns, name, query)
        if sub not in (None, "status") or (sub and sub not in res.subresources):
            raise ApiError(404, "NotFound", "the server could not find the requested resource", {})
        if method == "GET":
            return self._send(200, store.get(res, ns, name))
        if method == "PUT":
            return self._update(res, ns, name, sub, self._body(), query)
        if method == "PATCH":
            return self._patch(res, ns, name, sub, self._body(), query)
        if method == "DELETE" and sub is None:
            obj = cluster.delete(res, ns, name, *self._delete_options(self._body(), query))
            return self._send(200, obj)
        raise ApiError(405, "MethodNotAllowed", f"{method} is not supported on {path}")

    def _discovery(self, reg, path: str):
        if path == "/version":
            return VERSION
        if path == "/api":
            return reg.core_versions()
        if path == "/api/v1":
            return reg.resource_list("", "v1")
        if path == "/apis":
            return reg.api_groups()
        parts = path.strip("/").split("/")
        if parts[0] == "apis" and len(parts) == 2:
            return reg.api_group(parts[1]) or self._missing()
        if parts[0] == "apis" and len(parts) == 3:
            return reg.resource_list(parts[1], parts[2]) or self._missing()
        return None

    @staticmethod
    def _missing():
        raise ApiError(404, "NotFound", "the server could not find the requested resource", {})

    @staticmethod
    def _delete_options(body: dict, query: dict):
        policy = (body or {}).get("propagationPolicy") or query.get("propagationPolicy")
        grace = (body or {}).get("gracePeriodSeconds", query.get("gracePeriodSeconds"))
        if (body or {}).get("orphanDependents") is True or query.get("orphanDependents") == "true":
            policy = "Orphan"
        return policy, (int(grace) if grace is not None else None)

    def _check_kind(self, res, obj):
        if not isinstance(obj, dict):
            raise ApiError(400, "BadRequest", "the body of the request was not an object")
        if obj.get("kind") != res.kind or obj.get("apiVersion") != res.api_version:
            raise ApiError(
                400,
                "BadRequest",
                f"the API version in the data ({obj.get('apiVersion')}) "
                f"and kind ({obj.get('kind')}) do not match the URL's {res.api_version} "
                f"{res.kind}",
            )

    def _namespace(self, res, ns, obj):
        meta = obj.setdefault("metadata", {})
        if res.namespaced:
            if meta.get("namespace") and meta["namespace"] != ns:
                raise ApiError(
                    400,
                    "BadRequest",
                    "the namespace of the provided object does not "
                    "match the namespace sent on the request",
                )
            meta["namespace"] = ns
        else:
            meta.pop("namespace", None)

    def _create(self, res, ns, obj, query):
        if res.namespaced and ns is None:
            raise ApiError(405, "MethodNotAllowed", "create needs a namespace in the path")
        self._check_kind(res, obj)
        self._namespace(res, ns, obj)
        for field in ("uid", "resourceVersion", "creationTimestamp", "deletionTimestamp"):
            obj["metadata"].pop(field, None)
        obj.pop("status", None) if res.kind not in ("Event", "Node") else None
        self.cluster.admit(res, obj)
        validate_object(res, obj)
        if query.get("dryRun") == "All":
            return self._send(201, obj)
        return self._send(201, self.cluster.store.create(res, obj))

    def _update(self, res, ns, name, sub, obj, query):
        self._check_kind(res, obj)
        self._namespace(res, ns, obj)
        if obj["metadata"].get("name") != name:
            raise ApiError(
                400, "BadRequest", "the name of the object does not match the name on the URL"
            )
        old = self.cluster.store.get(res, ns, name)
        if sub == "status":
            obj = {**old, "status": obj.get("status")}
        elif "status" in old:
            obj["status"] = old["status"]
        validate_object(res, obj)
        if query.get("dryRun") == "All":
            return self._send(200, obj)
        return self._send(
            200, self.cluster.store.replace(res, obj, obj["metadata"].get("resourceVersion"))
        )

    def _patch(self, res, ns, name, sub, body, query):
        ctype = self.headers.get("Content-Type", "")
        store = self.cluster.store
        with store.cond:
            old = store.find(res, ns, name)
            if old is None:
                if ctype.startswith("application/apply-patch"):
                    self._check_kind(res, body)
                    return self._create(res, ns, body, query)
                raise not_found(res, name)
            new = patches.apply_patch(ctype, old, body)
            if sub == "status":
                new = {**old, "status": new.get("status")}
            elif "status" in old and not ctype.startswith("application/apply-patch"):
                new["status"] = old["status"]
            self._check_kind(res, new)
            self._namespace(res, ns, new)
            validate_object(res, new)
            if query.get("dryRun") == "All":
                return self._send(200, new)
            out = store.replace(
                res,
                new,
                (body.get("metadata") or {}).get("resourceVersion")
                if isinstance(body, dict)
                else None,
            )
        return self._send(200, out)

    def _watch(self, res, ns, query):
        timeout = float(query.get("timeoutSeconds") or 1800)
        events = self.cluster.store.watch(
            res,
            ns,
            query.get("resourceVersion"),
            query.get("labelSelector"),
            query.get("fieldSelector"),
            time.monotonic() + timeout,
            lambda: self.cluster.stopping,
        )
        self._start_stream("application/json")
        try:
            for kind, obj in events:
                self._chunk(json.dumps({"type": kind, "object": obj}).encode() + b"\n")
        except OSError:
            self.close_connection = True
            return
        self._end_stream()

    def _log(self, ns, name, query):
        chunks = self.cluster.kubelet.log_stream(
            ns, name, query
        )  # raises ApiError before streaming
        first = next(chunks, b"")
        self._start_stream("text/plain")
        try:
            if first:
                self._chunk(first)
            for data in chunks:
                if data:
                    self._chunk(data)
        except OSError:
            self.close_connection = True
            return
        self._end_stream()


class ApiServer:
    def __init__(self, cluster):
        handler = type("BoundHandler", (Handler,), {"cluster": cluster})
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(
            target=self.httpd.serve_forever,
            kwargs={"poll_interval": 0.1},
            name="kube-fake-api",
            daemon=True,
        )

    def start(self):
        self.thread.start()

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)
