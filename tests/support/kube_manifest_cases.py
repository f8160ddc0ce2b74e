"""The kubernetes target's manifests as the tests build and check them: the golden cases,
the strict schemas with their CEL rules, and the argv and env a kubelet would start each
container with."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
import yaml

from jupyter_trainer.core.spec import CodeSpec, EnvSpec, LaunchSpec, RunSpec, TargetSpec
from jupyter_trainer.targets.kubernetes.config import KubeConfig
from jupyter_trainer.targets.kubernetes.manifests import (
    RunObjects,
    launcher_command,
    manifests,
    pod_plan,
    spec_json,
)
from jupyter_trainer.targets.kubernetes.names import is_dns_label, is_label_value

kubernetes_validate = pytest.importorskip("kubernetes_validate")
jsonschema = pytest.importorskip("jsonschema")

from support.kube_fake.validation import strict  # noqa: E402 (after the skips)

GOLDEN = Path(__file__).parent / "golden" / "kube"
CRD = (
    Path(__file__).resolve().parent
    / "kube_fake"
    / "schemas"
    / "trainer.kubeflow.org_trainjobs.yaml"
)
K8S_VERSION = "1.31"
IMAGE = "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime"
HOSTILE = [
    "$(rm -rf /)",
    "'; rm -rf ~'",
    "`id`",
    "a b\nc",
    "-rf",
    "ünï©ødé ☃",
    "x" * 300,
    "--leading",
    "..",
    ".hidden",
    "UPPER.case_Name",
    "",
    "-",
    "a/b",
    "0123",
]


def make_spec(
    launcher="torchrun", nodes=1, procs=1, name="digits", params=None, args=(), image=None, data=()
) -> RunSpec:
    return RunSpec(
        name=name,
        code=CodeSpec(entry="_jt/cell.py", hash="0123456789abcdef", args=tuple(args)),
        launch=LaunchSpec(launcher, nodes=nodes, procs=procs),
        target=TargetSpec("k8s"),
        env=EnvSpec(image=image),
        params=params or {"lr": 0.01},
        data=tuple(data),
    )


CASES = {
    "job_1x1": (
        make_spec(),
        {"api": "job", "namespace": "ml", "image": IMAGE},
        "digits-20261124-101500-abc123",
    ),
    "job_2x4_gpu": (
        make_spec(nodes=2, procs=4),
        {
            "api": "job",
            "namespace": "ml",
            "image": IMAGE,
            "gpus_per_node": 4,
            "resources": {"cpu": "16", "memory": "64Gi"},
            "node_selector": {"cloud.example.com/gpu": "a100"},
            "tolerations": [
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
            ],
            "service_account": "trainer",
        },
        "digits-20261124-101500-abc123",
    ),
    "trainjob_2x4_gpu": (
        make_spec(nodes=2, procs=4),
        {
            "api": "trainjob",
            "namespace": "ml",
            "image": IMAGE,
            "gpus_per_node": 4,
            "resources": {"requests": {"cpu": "8"}, "limits": {"memory": "64Gi"}},
            "workdir_pvc": "team-runs",
        },
        "digits-20261124-101500-abc123",
    ),
    "trainjob_mpirun": (
        make_spec("mpirun", nodes=2, procs=2),
        {"api": "trainjob", "namespace": "ml", "image": IMAGE},
        "digits-20261124-101500-abc123",
    ),
    "job_hostile": (
        make_spec(
            nodes=2,
            procs=2,
            name="Ünïcode $(rm -rf /) 'run' " + "y" * 60,
            params={
                "cmd": "'; rm -rf ~'",
                "sub": "$(touch /tmp/pwned)",
                "nested": {"a": ["`id`", 1.5, None]},
            },
            args=("--lr", "'; rm -rf ~'", "$(HOME)", "$$HOME a b"),
        ),
        {
            "api": "job",
            "namespace": "ml",
            "image": IMAGE,
            "env": {"WEIRD": 'x\'; echo $(PATH) $$ "y"'},
        },
        "Run.With.DOTS_and_CAPS-" + "9" * 100,
    ),
}


def build(case: str, snapshot: bytes = b"snapshot-bytes") -> list[dict]:
    return build_from(*CASES[case], snapshot=snapshot)


def build_from(
    spec: RunSpec,
    config: dict,
    run_id: str,
    snapshot: bytes = b"snapshot-bytes",
    secrets_json: str | None = None,
) -> list[dict]:
    cfg = KubeConfig.from_config("k8s", config)
    backend = "nccl" if cfg.gpus_per_node else "gloo"
    plan = pod_plan(spec, run_id, cfg, config["api"], backend)
    command = launcher_command(spec, plan, config["api"])
    objects = RunObjects(
        spec=spec,
        run_id=run_id,
        cfg=cfg,
        api=config["api"],
        namespace=cfg.namespace or "default",
        image=cfg.image or "",
        command=command,
        snapshot=snapshot,
        spec_json=spec_json(spec),
        secrets_json=secrets_json,
    )
    return manifests(objects)


def normalised(docs: list[dict]) -> list[dict]:
    """The pod program's source is pod.py itself: the golden files name it, not copy it."""
    docs = copy.deepcopy(docs)
    for doc in docs:
        if doc["kind"] == "ConfigMap":
            doc["data"]["pod.py"] = "<jupyter_trainer/rankside/programs/kube_pod.py>"
    return docs


# -- schemas ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def trainjob_schema():
    crd = yaml.safe_load(CRD.read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1alpha1"]
    return version["schema"]["openAPIV3Schema"]


# The CEL rules (x-kubernetes-validations) on the fields our TrainJobs set, as Python. A
# rule not listed here fails the test, so a new CRD rule on our path is never skipped.
CEL = {
    "self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')": lambda v: re.fullmatch(
        r"[a-z]([-a-z0-9]*[a-z0-9])?", v["metadata"]["name"]
    ),
    "size(self.metadata.name) <= 63": lambda v: len(v["metadata"]["name"]) <= 63,
    "self >= 1": lambda v: v >= 1,
    "self == oldSelf": lambda v: True,  # immutability: only on update
}


def cel_rules(schema, value, path="$"):
    """(path, rule, holds) for every CEL rule on a node the value has."""
    found = []
    for rule in schema.get("x-kubernetes-validations", []):
        check = CEL.get(rule["rule"])
        found.append((path, rule["rule"], None if check is None else bool(check(value))))
    if isinstance(value, dict):
        for key, sub in value.items():
            if key in schema.get("properties", {}):
                found += cel_rules(schema["properties"][key], sub, f"{path}.{key}")
    elif isinstance(value, list) and "items" in schema:
        for i, sub in enumerate(value):
            found += cel_rules(schema["items"], sub, f"{path}[{i}]")
    return found


def check_metadata(doc):
    meta = doc["metadata"]
    assert is_dns_label(meta["name"]), meta["name"]
    for key, value in meta.get("labels", {}).items():
        assert is_label_value(value), (key, value)
    annotations = meta.get("annotations", {})
    assert sum(len(k) + len(v.encode()) for k, v in annotations.items()) < 256 * 1024


def validate(doc, trainjob_schema):
    """``doc`` against its schema (and, for a TrainJob, the CRD's CEL rules on its fields)."""
    check_metadata(doc)
    if doc["kind"] == "TrainJob":
        jsonschema.Draft202012Validator(strict(trainjob_schema)).validate(doc)
        rules = cel_rules(trainjob_schema, doc)
        assert [r for r in rules if r[2] is None] == [], "CEL rules this test cannot check"
        assert [r for r in rules if r[2] is False] == []
    else:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def containers(doc):
    if doc["kind"] == "Job":
        return doc["spec"]["template"]["spec"]["containers"]
    if doc["kind"] == "TrainJob":
        return [doc["spec"]["trainer"]]
    return []


SHELLS = {"sh", "bash", "dash", "zsh", "/bin/sh", "/bin/bash", "/usr/bin/env"}


_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def kubelet_expand(text: str, env: dict) -> str:
    """What the kubelet does to a container's command, args and env values: ``$(NAME)`` of a
    defined variable is replaced, ``$$`` becomes ``$``."""
    return _REF.sub(lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)), text)


def as_started(container: dict) -> tuple[list[str], dict[str, str]]:
    """The argv and environment the container's process gets."""
    env = {"HOME": "/root", "PATH": "/usr/bin", "JOB_COMPLETION_INDEX": "0"}
    for e in container["env"]:
        env[e["name"]] = kubelet_expand(e["value"], env)
    argv = [kubelet_expand(a, env) for a in container["command"] + container.get("args", [])]
    return argv, env


def run_dir_with_code(tmp_path, payload: bytes = b"print('hello')\n") -> Path:
    run = tmp_path / "run"
    (run / "code" / "_jt").mkdir(parents=True)
    (run / "code" / "_jt" / "cell.py").write_bytes(payload)
    return run


def dry_run(target, spec, run):
    target.check(spec)
    plan = target.plan(spec, "digits-1", str(run), target.resolve_backend(spec.launch))
    return target.dry_run(spec, plan, target.command(spec, plan))
