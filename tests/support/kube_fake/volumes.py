"""What a pod's volumes, env and DNS names look like on the fake node."""

from __future__ import annotations

import base64
import math
import os
import re
from pathlib import Path

from .scheduler import quantity
from .store import field_value

DEFAULT_PATH = ":".join(
    [
        str(Path(os.sys.executable).parent),
        "/usr/local/sbin",
        "/usr/local/bin",
        "/usr/sbin",
        "/usr/bin",
        "/sbin",
        "/bin",
    ]
)


class NotReady(Exception):
    """A referenced object is missing: the container waits (reason, message)."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason, self.message = reason, message


def _files(store, res, ns, name, kind, optional=False) -> dict[str, bytes] | None:
    obj = store.find(res, ns, name)
    if obj is None:
        if optional:
            return {}
        raise NotReady("FailedMount", f'{kind} "{name}" not found')
    if kind == "secret":
        return {k: base64.b64decode(v) for k, v in (obj.get("data") or {}).items()} | {
            k: v.encode() for k, v in (obj.get("stringData") or {}).items()
        }
    return {k: v.encode() for k, v in (obj.get("data") or {}).items()} | {
        k: base64.b64decode(v) for k, v in (obj.get("binaryData") or {}).items()
    }


def _write(dir_: Path, files: dict[str, bytes], items, mode):
    dir_.mkdir(parents=True, exist_ok=True)
    chosen = (
        [(i["key"], i["path"], i.get("mode")) for i in items]
        if items
        else [(k, k, None) for k in files]
    )
    for key, rel, item_mode in chosen:
        if key not in files:
            raise NotReady("FailedMount", f"configmap references non-existent config key: {key}")
        path = dir_ / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(files[key])
        path.chmod(item_mode if item_mode is not None else mode)


def materialise(cluster, pod: dict, pod_dir: Path) -> dict[str, Path]:
    """The host directory (or file) of each of the pod's volumes."""
    ns, reg, store = pod["metadata"]["namespace"], cluster.registry, cluster.store
    out = {}
    for vol in pod["spec"].get("volumes") or []:
        name, where = vol["name"], pod_dir / "volumes" / vol["name"]
        if "configMap" in vol:
            cm = vol["configMap"]
            files = _files(
                store,
                reg.find("", "v1", "configmaps"),
                ns,
                cm["name"],
                "configmap",
                cm.get("optional", False),
            )
            _write(where, files, cm.get("items"), cm.get("defaultMode", 0o644))
        elif "secret" in vol:
            sec = vol["secret"]
            files = _files(
                store,
                reg.find("", "v1", "secrets"),
                ns,
                sec["secretName"],
                "secret",
                sec.get("optional", False),
            )
            _write(where, files, sec.get("items"), sec.get("defaultMode", 0o644))
            owner = run_as_user(pod)
            if owner:
                for path in [where, *where.rglob("*")]:
                    os.chown(path, owner, -1)
        elif "emptyDir" in vol:
            where.mkdir(parents=True, exist_ok=True)
        elif "persistentVolumeClaim" in vol:
            claim = vol["persistentVolumeClaim"]["claimName"]
            where = cluster.root / "pvcs" / ns / claim
            where.mkdir(parents=True, exist_ok=True)
        elif "hostPath" in vol:
            where = Path(vol["hostPath"]["path"])
            if vol["hostPath"].get("type") == "DirectoryOrCreate":
                where.mkdir(parents=True, exist_ok=True)
        elif "downwardAPI" in vol:
            where.mkdir(parents=True, exist_ok=True)
            for item in vol["downwardAPI"].get("items") or []:
                value = fieldref(pod, item["fieldRef"]["fieldPath"]) if "fieldRef" in item else ""
                (where / item["path"]).write_text(value)
        else:
            raise NotReady(
                "FailedMount",
                f"volume {name}: this kind of volume is not supported by the fake kubelet",
            )
        out[name] = where
    return out


def run_as_user(pod: dict) -> int | None:
    """The user a pod asks its containers to run as. The fake runs them as root (the host's
    Python is not another user's to run) but gives that user its Secret files, so that a key
    is, as under a real kubelet, not the process's own: ssh refuses a key of its own user
    that others may read (a private key mounted 0640)."""
    contexts = [pod["spec"].get("securityContext") or {}] + [
        c.get("securityContext") or {} for c in pod["spec"]["containers"]
    ]
    users = [ctx["runAsUser"] for ctx in contexts if ctx.get("runAsUser")]
    return users[-1] if users else None


def fieldref(pod: dict, path: str) -> str:
    m = re.match(r"^metadata\.(labels|annotations)\['(.+)'\]$", path)
    if m:
        return (pod["metadata"].get(m.group(1)) or {}).get(m.group(2), "")
    if path == "status.podIPs":
        return "127.0.0.1"
    value = field_value(pod, path)
    return "" if value is None else str(value)


_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def expand(text: str, env: dict) -> str:
    """Kubernetes' $(VAR) expansion: known names are replaced, $$ is a literal $."""

    def sub(m):
        if m.group(0) == "$$":
            return "$"
        return env.get(m.group(1), m.group(0))

    return _REF.sub(sub, text)


def container_env(cluster, pod: dict, c: dict, node: dict) -> dict:
    ns, reg, store = pod["metadata"]["namespace"], cluster.registry, cluster.store
    spec = pod["spec"]
    env = {
        "PATH": DEFAULT_PATH,
        "HOME": "/root",
        "HOSTNAME": spec.get("hostname") or pod["metadata"]["name"][:63],
        "KUBERNETES_SERVICE_HOST": "127.0.0.1",
        "KUBERNETES_SERVICE_PORT": str(cluster.in_cluster.port),
        "KUBERNETES_PORT": f"tcp://127.0.0.1:{cluster.in_cluster.port}",
    }
    for src in c.get("envFrom") or []:
        ref = src.get("configMapRef") or src.get("secretRef")
        kind = "configmap" if "configMapRef" in src else "secret"
        res = reg.find("", "v1", "configmaps" if kind == "configmap" else "secrets")
        files = _files(store, res, ns, ref["name"], kind, ref.get("optional", False))
        for k, v in files.items():
            env[src.get("prefix", "") + k] = v.decode()
    for e in c.get("env") or []:
        if "valueFrom" not in e:
            env[e["name"]] = expand(e.get("value", ""), env)
            continue
        vf = e["valueFrom"]
        if "fieldRef" in vf:
            env[e["name"]] = fieldref(pod, vf["fieldRef"]["fieldPath"])
        elif "configMapKeyRef" in vf or "secretKeyRef" in vf:
            ref = vf.get("configMapKeyRef") or vf.get("secretKeyRef")
            kind = "configmap" if "configMapKeyRef" in vf else "secret"
            res = reg.find("", "v1", "configmaps" if kind == "configmap" else "secrets")
            try:
                files = _files(store, res, ns, ref["name"], kind, ref.get("optional", False))
            except NotReady as exc:
                raise NotReady("CreateContainerConfigError", exc.message) from None
            if ref["key"] in files:
                env[e["name"]] = files[ref["key"]].decode()
            elif not ref.get("optional"):
                raise NotReady(
                    "CreateContainerConfigError",
                    f"couldn't find key {ref['key']} in {kind.capitalize()} {ns}/{ref['name']}",
                )
        elif "resourceFieldRef" in vf:
            rf = vf["resourceFieldRef"]
            kind, _, name = rf["resource"].partition(".")
            value = ((c.get("resources") or {}).get(kind) or {}).get(name) or node["status"][
                "allocatable"
            ].get(name, "0")
            env[e["name"]] = str(math.ceil(quantity(value) / quantity(rf.get("divisor", "1"))))
    return env


def hosts_file(
    cluster, pod: dict, pods: list[dict], services: list[dict], pod_ip=lambda uid: "127.0.0.1"
) -> str:
    """The pod's /etc/hosts: its own names, then the cluster DNS names (headless-service pod
    records on each pod's IP, service names on 127.0.0.1)."""
    ns, spec = pod["metadata"]["namespace"], pod["spec"]
    hostname = spec.get("hostname") or pod["metadata"]["name"][:63]
    own = [hostname]
    if spec.get("subdomain"):
        own.insert(0, f"{hostname}.{spec['subdomain']}.{ns}.svc.cluster.local")
    lines = [
        "# Kubernetes-managed hosts file (the fake kubelet's, with the cluster's DNS names).",
        pod_ip(pod["metadata"]["uid"]) + "\t" + "\t".join(own),
        "127.0.0.1\tlocalhost",
        "::1\tlocalhost ip6-localhost ip6-loopback",
    ]
    headless = {
        (s["metadata"]["namespace"], s["metadata"]["name"])
        for s in services
        if s["spec"].get("clusterIP") == "None"
    }
    for s in services:
        sns, name = s["metadata"]["namespace"], s["metadata"]["name"]
        names = [f"{name}.{sns}.svc.cluster.local", f"{name}.{sns}.svc", f"{name}.{sns}"]
        lines.append("127.0.0.1\t" + "\t".join(names + ([name] if sns == ns else [])))
    for p in pods:
        pns, pspec = p["metadata"]["namespace"], p["spec"]
        if not pspec.get("hostname") or (pns, pspec.get("subdomain")) not in headless:
            continue
        base = f"{pspec['hostname']}.{pspec['subdomain']}"
        names = [f"{base}.{pns}.svc.cluster.local", f"{base}.{pns}.svc", f"{base}.{pns}"]
        lines.append(
            pod_ip(p["metadata"]["uid"]) + "\t" + "\t".join(names + ([base] if pns == ns else []))
        )
    return "\n".join(lines) + "\n"
