"""Objects with resource versions, the history of changes, and watch streams over it."""

from __future__ import annotations

import copy
import re
import threading
import time
import uuid
from datetime import datetime, timezone

from .resources import Resource

HISTORY = 20000


def now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class ApiError(Exception):
    """An error the server answers with a Status object."""

    def __init__(self, code: int, reason: str, message: str, details: dict | None = None):
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details

    def status(self) -> dict:
        out = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details is not None:
            out["details"] = self.details
        return out


def not_found(res: Resource, name: str) -> ApiError:
    what = f"{res.plural}.{res.group}" if res.group else res.plural
    return ApiError(
        404,
        "NotFound",
        f'{what} "{name}" not found',
        {"name": name, "group": res.group, "kind": res.plural},
    )


_LABEL_TERM = re.compile(
    r"^\s*(!?)([A-Za-z0-9_./-]+)\s*(?:(==|=|!=)\s*([A-Za-z0-9_.-]*)|"
    r"\s+(in|notin)\s*\(([^)]*)\))?\s*$"
)


def _split_terms(selector: str) -> list[str]:
    terms, depth, cur = [], 0, ""
    for ch in selector:
        if ch == "," and depth == 0:
            terms.append(cur)
            cur = ""
            continue
        depth += ch == "("
        depth -= ch == ")"
        cur += ch
    if cur.strip():
        terms.append(cur)
    return terms


def label_matcher(selector: str | None):
    if not selector:
        return lambda labels: True
    checks = []
    for term in _split_terms(selector):
        m = _LABEL_TERM.match(term)
        if not m:
            raise ApiError(400, "BadRequest", f"unable to parse requirement: {term!r}")
        neg, key, op, value, setop, values = m.groups()
        if op in ("=", "=="):
            checks.append(lambda l, k=key, v=value: l.get(k) == v)
        elif op == "!=":
            checks.append(lambda l, k=key, v=value: l.get(k) != v)
        elif setop:
            vals = {v.strip() for v in values.split(",")}
            if setop == "in":
                checks.append(lambda l, k=key, vs=vals: l.get(k) in vs)
            else:
                checks.append(lambda l, k=key, vs=vals: l.get(k) not in vs)
        elif neg:
            checks.append(lambda l, k=key: k not in l)
        else:
            checks.append(lambda l, k=key: k in l)
    return lambda labels: all(c(labels or {}) for c in checks)


def field_value(obj: dict, path: str):
    cur = obj
    for part in path.split("."):
        if not isinstance(cur, dict):
            return None
        cur = cur.get(part)
    return cur


def field_matcher(selector: str | None):
    if not selector:
        return lambda obj: True
    checks = []
    for term in selector.split(","):
        m = re.match(r"^\s*([A-Za-z0-9_.]+)\s*(==|=|!=)\s*(.*?)\s*$", term)
        if not m:
            raise ApiError(400, "BadRequest", f"invalid field selector: {term!r}")
        path, op, value = m.groups()

        def check(obj, p=path, o=op, v=value):
            got = field_value(obj, p)
            got = "" if got is None else str(got)
            return (got == v) if o != "!=" else (got != v)

        checks.append(check)
    return lambda obj: all(c(obj) for c in checks)


class Store:
    """Every object of the cluster, keyed by (resource, namespace, name)."""

    def __init__(self):
        self.cond = threading.Condition(threading.RLock())
        self.objects: dict[tuple, dict] = {}
        self.rv = 0
        self.history: list[tuple[int, Resource, str, dict]] = []
        self.closed = False
        self.listeners: list = []  # called (without the lock) after each change

    @staticmethod
    def key(res: Resource, ns: str | None, name: str) -> tuple:
        return (res.group, res.plural, ns if res.namespaced else None, name)

    def _record(self, res: Resource, kind: str, obj: dict) -> dict:
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        self.history.append((self.rv, res, kind, copy.deepcopy(obj)))
        del self.history[:-HISTORY]
        self.cond.notify_all()
        return copy.deepcopy(obj)

    def _notify(self):
        for listener in list(self.listeners):
            listener()

    def get(self, res: Resource, ns: str | None, name: str) -> dict:
        with self.cond:
            obj = self.objects.get(self.key(res, ns, name))
            if obj is None:
                raise not_found(res, name)
            return copy.deepcopy(obj)

    def find(self, res: Resource, ns: str | None, name: str) -> dict | None:
        try:
            return self.get(res, ns, name)
        except ApiError:
            return None

    def list(
        self,
        res: Resource,
        ns: str | None = None,
        labels: str | None = None,
        fields: str | None = None,
    ) -> tuple[list[dict], str]:
        lm, fm = label_matcher(labels), field_matcher(fields)
        with self.cond:
            items = [
                copy.deepcopy(o)
                for k, o in self.objects.items()
                if k[:2] == (res.group, res.plural)
                and (ns is None or k[2] == ns)
                and lm(o["metadata"].get("labels"))
                and fm(o)
            ]
            return sorted(
                items, key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"])
            ), str(self.rv)

    def create(self, res: Resource, obj: dict) -> dict:
        meta = obj.setdefault("metadata", {})
        with self.cond:
            if not meta.get("name") and meta.get("generateName"):
                meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
            key = self.key(res, meta.get("namespace"), meta.get("name", ""))
            if key in self.objects:
                what = f"{res.plural}.{res.group}" if res.group else res.plural
                raise ApiError(
                    409,
                    "AlreadyExists",
                    f'{what} "{meta["name"]}" already exists',
                    {"name": meta["name"], "group": res.group, "kind": res.plural},
                )
            meta["uid"] = meta.get("uid") or str(uuid.uuid4())
            meta["creationTimestamp"] = now()
            meta["generation"] = 1
            meta.pop("deletionTimestamp", None)
            obj["apiVersion"], obj["kind"] = res.api_version, res.kind
            self.objects[key] = obj
            out = self._record(res, "ADDED", obj)
        self._notify()
        return out

    def replace(self, res: Resource, obj: dict, expect_rv: str | None = None) -> dict:
        """Store a new version of an existing object (the caller changed a copy of it)."""
        meta = obj["metadata"]
        with self.cond:
            key = self.key(res, meta.get("namespace"), meta["name"])
            old = self.objects.get(key)
            if old is None:
                raise not_found(res, meta["name"])
            if expect_rv and expect_rv != old["metadata"]["resourceVersion"]:
                what = f"{res.plural}.{res.group}" if res.group else res.plural
                raise ApiError(
                    409,
                    "Conflict",
                    f'Operation cannot be fulfilled on {what} "{meta["name"]}": the object '
                    "has been modified; please apply your changes to the latest version "
                    "and try again",
                    {"name": meta["name"], "group": res.group, "kind": res.plural},
                )
            for field in ("uid", "creationTimestamp", "deletionTimestamp", "generation"):
                if field in old["metadata"]:
                    meta[field] = old["metadata"][field]
                else:
                    meta.pop(field, None)
            if old.get("spec") != obj.get("spec"):
                meta["generation"] = old["metadata"].get("generation", 1) + 1
            if old == {
                **obj,
                "metadata": {**meta, "resourceVersion": old["metadata"]["resourceVersion"]},
            }:
                return copy.deepcopy(old)
            if (
                old["metadata"].get("finalizers")
                and old["metadata"].get("deletionTimestamp")
                and not meta.get("finalizers")
            ):
                del self.objects[key]
                out = self._record(res, "DELETED", obj)
            else:
                self.objects[key] = obj
                out = self._record(res, "MODIFIED", obj)
        self._notify()
        return out

    def mutate(self, res: Resource, ns: str | None, name: str, change) -> dict | None:
        """Apply ``change(obj)`` to the stored object under the lock; None when it is gone."""
        with self.cond:
            obj = self.find(res, ns, name)
            if obj is None:
                return None
            change(obj)
            return self.replace(res, obj)

    def mark_deleted(
        self,
        res: Resource,
        ns: str | None,
        name: str,
        finalizer: str | None = None,
        grace: int | None = None,
        keep: bool = False,
    ) -> dict:
        """Set deletionTimestamp (adding ``finalizer``), or remove an object without finalizers
        (unless ``keep``: a pod stays until the kubelet has stopped its containers)."""
        with self.cond:
            obj = self.get(res, ns, name)
            meta = obj["metadata"]
            if finalizer and finalizer not in meta.setdefault("finalizers", []):
                meta["finalizers"].append(finalizer)
            if not meta.get("finalizers") and not keep:
                return self.remove(res, ns, name)
            if meta.get("deletionTimestamp"):
                return obj
            key = self.key(res, ns, name)
            meta["deletionTimestamp"] = now()
            if grace is not None:
                meta["deletionGracePeriodSeconds"] = grace
            self.objects[key] = obj
            out = self._record(res, "MODIFIED", obj)
        self._notify()
        return out

    def remove(self, res: Resource, ns: str | None, name: str) -> dict:
        with self.cond:
            key = self.key(res, ns, name)
            obj = self.objects.pop(key, None)
            if obj is None:
                raise not_found(res, name)
            out = self._record(res, "DELETED", obj)
        self._notify()
        return out

    def watch(
        self,
        res: Resource,
        ns: str | None,
        rv: str | None,
        labels: str | None,
        fields: str | None,
        deadline: float,
        stop,
    ):
        """Yield (type, object) events of ``res`` after ``rv``; ADDED for every current object first
        when no version is given. Ends at ``deadline`` or when ``stop()`` says so."""
        lm, fm = label_matcher(labels), field_matcher(fields)

        def wanted(r, o):
            return (
                (r.group, r.plural) == (res.group, res.plural)
                and (ns is None or o["metadata"].get("namespace") == ns)
                and lm(o["metadata"].get("labels"))
                and fm(o)
            )

        with self.cond:
            if not rv or rv == "0":
                items, current = self.list(res, ns, labels, fields)
                pending = [("ADDED", o) for o in items]
                seen = int(current)
            else:
                seen = int(rv)
                if self.history and seen < self.history[0][0] - 1:
                    yield (
                        "ERROR",
                        ApiError(
                            410,
                            "Expired",
                            f"too old resource version: {seen} ({self.history[0][0] - 1})",
                        ).status(),
                    )
                    return
                pending = []
        while True:
            yield from pending
            pending = []
            with self.cond:
                while not self.closed and not stop() and time.monotonic() < deadline:
                    new = (
                        [h for h in self.history[-(self.rv - seen) :] if h[0] > seen]
                        if self.rv > seen
                        else []
                    )
                    if new:
                        break
                    self.cond.wait(0.5)
                else:
                    return
                for hrv, hres, kind, obj in new:
                    seen = hrv
                    if wanted(hres, obj):
                        pending.append((kind, copy.deepcopy(obj)))
