"""The kubernetes target's names, settings and manifests, without a cluster.

Every manifest is validated against the real schemas: the Kubeflow Trainer TrainJob CRD's
openAPIV3Schema (tests/kube_fake/schemas, made strict: a field the CRD does not know fails here
instead of being pruned by the API server) and the core batch/v1 Job, v1 Service and v1
ConfigMap schemas shipped by kubernetes-validate. Golden files hold the manifests of 1x1,
2x4 with GPUs (both APIs), mpirun on the Trainer's MPI runtime, and a run with hostile
names, parameters and arguments; regenerate them with JT_UPDATE_GOLDEN=1 after a
deliberate change. The pod program (pod.py) runs here as a real process.
"""

from __future__ import annotations

import base64
import copy
import io
import json
import os
import re
import stat
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from jupyter_trainer.core.errors import TargetError
from jupyter_trainer.core.spec import CodeSpec, DataSpec, EnvSpec, LaunchSpec, RunSpec, TargetSpec
from jupyter_trainer.nodes.mirror import LocalFiles
from jupyter_trainer.targets.kubernetes import KubernetesTarget, stream
from jupyter_trainer.targets.kubernetes.config import KubeConfig
from jupyter_trainer.targets.kubernetes.manifests import (
    CONFIGMAP_LIMIT,
    RunObjects,
    launcher_command,
    manifests,
    pod_plan,
    spec_json,
    to_yaml,
)
from jupyter_trainer.targets.kubernetes.names import (
    RUN_ID_LABEL,
    dns_label,
    is_dns_label,
    is_label_value,
    label_value,
    object_name,
)
from jupyter_trainer.targets.registry import get_target

kubernetes_validate = pytest.importorskip("kubernetes_validate")
jsonschema = pytest.importorskip("jsonschema")

from kube_fake.validation import strict  # noqa: E402 (after the skips)

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
    spec: RunSpec, config: dict, run_id: str, snapshot: bytes = b"snapshot-bytes"
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
    )
    return manifests(objects)


def normalised(docs: list[dict]) -> list[dict]:
    """The pod program's source is pod.py itself: the golden files name it, not copy it."""
    docs = copy.deepcopy(docs)
    for doc in docs:
        if doc["kind"] == "ConfigMap":
            doc["data"]["pod.py"] = "<jupyter_trainer/rankside/kube_pod.py>"
    return docs


# -- golden files ----------------------------------------------------------------------
@pytest.mark.parametrize("case", sorted(CASES))
def test_manifests_match_golden(case):
    text = to_yaml(normalised(build(case)))
    golden = GOLDEN / f"{case}.yaml"
    if os.environ.get("JT_UPDATE_GOLDEN"):
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(text)
    assert text.splitlines() == golden.read_text().splitlines()


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


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_manifest_is_schema_valid(case, trainjob_schema):
    for doc in build(case):
        validate(doc, trainjob_schema)


def test_strict_schemas_catch_a_misspelt_field(trainjob_schema):
    """The validation above would fail on a typo (it is not a pass-everything schema)."""
    (cm, job) = build("trainjob_2x4_gpu")
    job["spec"]["trainer"]["numProcsPerNode"] = 4
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft202012Validator(strict(trainjob_schema)).validate(job)
    (cm, svc, indexed) = build("job_1x1")
    indexed["spec"]["template"]["spec"]["containers"][0]["comand"] = ["x"]
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(indexed, K8S_VERSION, strict=True)


def test_the_configmap_limit_is_under_a_mebibyte():
    assert CONFIGMAP_LIMIT < 1024 * 1024


# -- no shell, anywhere ----------------------------------------------------------------
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


@pytest.mark.parametrize("case", sorted(CASES))
def test_containers_run_argv_lists_without_a_shell(case):
    spec = CASES[case][0]
    for doc in build(case):
        for c in containers(doc):
            argv, _ = as_started(c)
            assert all(isinstance(a, str) for a in argv)
            assert not SHELLS & set(argv) and "-c" not in argv, argv
            for value in [*spec.code.args, *map(str, spec.params.values())]:
                # a user value is a whole argument, never part of a longer one
                assert not any(value in a and value != a for a in argv), (value, argv)


RUN_IDS = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}", fullmatch=True).filter(
    lambda r: ".." not in r
)
NAMES = st.text(
    st.characters(blacklist_categories=("Cc", "Cs", "Zl", "Zp", "Cn", "Co", "Cf")),
    min_size=1,
    max_size=100,
).filter(str.isprintable)


@settings(max_examples=25, deadline=None)
@given(
    run_id=RUN_IDS,
    name=NAMES,
    args=st.lists(st.text(max_size=40), max_size=4),
    value=st.text(max_size=60),
    api=st.sampled_from(["job", "trainjob"]),
    nodes=st.integers(1, 3),
)
def test_any_run_gives_valid_manifests_that_carry_its_values(
    run_id, name, args, value, api, nodes, trainjob_schema
):
    spec = make_spec(nodes=nodes, procs=2, name=name, params={"p": value}, args=args)
    config = {"api": api, "namespace": "ml", "image": IMAGE, "env": {"V": value}}
    for doc in build_from(spec, config, run_id):
        validate(doc, trainjob_schema)
        for c in containers(doc):
            argv, env = as_started(c)
            if args:
                assert argv[-len(args) :] == args
            assert env["V"] == value and env["JT_RUN_ID"] == run_id
        assert json.loads(doc["metadata"]["annotations"]["jupyter-trainer/params"]) == {"p": value}


def test_hostile_values_arrive_unchanged():
    spec, config, run_id = CASES["job_hostile"]
    (cm, svc, job) = build("job_hostile")
    argv, env = as_started(job["spec"]["template"]["spec"]["containers"][0])
    assert argv[-4:] == list(spec.code.args)
    assert env["WEIRD"] == config["env"]["WEIRD"] and env["JT_RUN_ID"] == run_id
    assert json.loads(job["metadata"]["annotations"]["jupyter-trainer/params"]) == spec.params
    assert job["metadata"]["annotations"][RUN_ID_LABEL] == run_id
    assert json.loads(cm["data"]["spec.json"])["params"] == spec.params


# -- names -----------------------------------------------------------------------------
@pytest.mark.parametrize("text", HOSTILE + ["digits-20261124-101500-abc123"])
def test_names_are_valid_and_distinct(text):
    assert is_dns_label(dns_label(text)) and is_label_value(label_value(text))
    name = object_name(text)
    assert is_dns_label(name) and len(name) <= 40
    assert is_dns_label(f"{name}-node-0-0-abcde") and is_dns_label(f"{name}-12-abcde")


def test_valid_names_are_kept_and_changed_ones_get_a_hash():
    assert dns_label("digits-1") == "digits-1"
    assert label_value("Run.1_x") == "Run.1_x"
    changed = dns_label("Digits 1")
    assert changed.startswith("digits-1-") and changed != dns_label("digits 1")
    assert label_value("x" * 64) != label_value("x" * 65)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=400))
def test_any_text_gives_valid_names(text):
    assert is_dns_label(dns_label(text))
    assert is_label_value(label_value(text))
    assert is_dns_label(object_name(text), 40)
    assert dns_label(text) == dns_label(text)


@settings(max_examples=200, deadline=None)
@given(st.text(min_size=1, max_size=80), st.text(min_size=1, max_size=80))
def test_different_texts_never_share_a_changed_name(a, b):
    if a != b and dns_label(a) != a and dns_label(b) != b:
        assert dns_label(a) != dns_label(b)


# -- settings --------------------------------------------------------------------------
BAD_SETTINGS = [
    ({"colour": "red"}, "unknown key"),
    ({"namespace": "ML_Team"}, "namespace"),
    ({"gpus_per_node": -1}, "gpus_per_node"),
    ({"gpus_per_node": "4"}, "gpus_per_node"),
    ({"api": "kubectl"}, "api"),
    ({"image": "has space"}, "image"),
    ({"resources": {"cpu": "lots"}}, "resources"),
    ({"resources": {"nvidia.com/gpu": "1"}}, "gpus_per_node"),
    ({"resources": {"requests": {"cpu": "1"}, "cpu": "2"}}, "resources"),
    ({"node_selector": {"gpu": "a b"}}, "node_selector"),
    ({"node_selector": ["gpu"]}, "node_selector"),
    ({"tolerations": [{"key": "x", "operator": "Maybe"}]}, "tolerations"),
    ({"tolerations": [{"key": "x", "colour": "red"}]}, "tolerations"),
    ({"tolerations": {"key": "x"}}, "tolerations"),
    ({"service_account": "Bad Account"}, "service_account"),
    ({"workdir_pvc": "/mnt/runs"}, "workdir_pvc"),
    ({"runtime": "Torch Distributed"}, "runtime"),
    ({"env": {"1BAD": "x"}}, "env"),
    ({"connect_timeout": 0}, "connect_timeout"),
]


@pytest.mark.parametrize("config,named", BAD_SETTINGS)
def test_bad_settings_name_the_setting(config, named):
    with pytest.raises(TargetError, match=re.escape(named)):
        KubernetesTarget("k8s", config)


def test_the_kind_is_registered(tmp_path):
    (tmp_path / "targets.toml").write_text(
        '[targets.k8s]\nkind = "kubernetes"\nimage = "repo/img:1"\napi = "job"\n'
    )
    assert isinstance(get_target("k8s", home=tmp_path), KubernetesTarget)


def test_kubeconfig_defaults_to_the_users(monkeypatch, tmp_path):
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert KubeConfig().kubeconfig_path() == tmp_path / ".kube" / "config"
    monkeypatch.setenv("KUBECONFIG", f"{tmp_path}/a{os.pathsep}{tmp_path}/b")
    assert KubeConfig().kubeconfig_path() == tmp_path / "a"
    assert KubeConfig(kubeconfig="~/k").kubeconfig_path() == tmp_path / "k"


# -- the target, without a cluster -----------------------------------------------------
def run_dir_with_code(tmp_path, payload: bytes = b"print('hello')\n") -> Path:
    run = tmp_path / "run"
    (run / "code" / "_jt").mkdir(parents=True)
    (run / "code" / "_jt" / "cell.py").write_bytes(payload)
    return run


def dry_run(target, spec, run):
    target.check(spec)
    plan = target.plan(spec, "digits-1", str(run), target.resolve_backend(spec.launch))
    return target.dry_run(spec, plan, target.command(spec, plan))


def test_dry_run_prints_every_object_as_yaml(tmp_path, trainjob_schema):
    target = KubernetesTarget("k8s", {"image": IMAGE, "api": "trainjob", "namespace": "ml"})
    docs = list(
        yaml.safe_load_all(
            dry_run(target, make_spec(nodes=2, procs=2), run_dir_with_code(tmp_path))
        )
    )
    assert [d["kind"] for d in docs] == ["ConfigMap", "TrainJob"]
    for doc in docs:
        validate(doc, trainjob_schema)
    with tarfile.open(
        fileobj=io.BytesIO(base64.b64decode(docs[0]["binaryData"]["snapshot.tar.gz"]))
    ) as tar:
        assert tar.extractfile("_jt/cell.py").read() == b"print('hello')\n"


def test_the_environment_image_is_used_and_one_is_required(tmp_path):
    target = KubernetesTarget("k8s", {"api": "job"})
    docs = list(
        yaml.safe_load_all(
            dry_run(target, make_spec(image="repo/env:7"), run_dir_with_code(tmp_path))
        )
    )
    assert docs[-1]["spec"]["template"]["spec"]["containers"][0]["image"] == "repo/env:7"
    with pytest.raises(TargetError, match="image"):
        target.check(make_spec())


def test_a_snapshot_too_large_for_a_configmap_names_workdir_pvc(tmp_path):
    target = KubernetesTarget("k8s", {"image": IMAGE, "api": "job"})
    with pytest.raises(TargetError, match="workdir_pvc"):
        dry_run(target, make_spec(), run_dir_with_code(tmp_path, os.urandom(1100 * 1024)))


def test_data_inputs_name_workdir_pvc():
    data = DataSpec(name="digits", source="/data", path="/data", hash="0" * 16)
    with pytest.raises(TargetError, match="workdir_pvc"):
        KubernetesTarget("k8s", {"image": IMAGE}).check(make_spec(data=[data]))


def test_mpirun_across_plain_jobs_is_refused_with_the_fix(tmp_path):
    target = KubernetesTarget("k8s", {"image": IMAGE, "api": "job"})
    with pytest.raises(TargetError, match="trainjob"):
        target.check(make_spec("mpirun", nodes=2, procs=2))
    dry_run(target, make_spec("mpirun", nodes=1, procs=2), run_dir_with_code(tmp_path))


# -- the pod program, as a real process ------------------------------------------------
WRITER = """
import json, os, sys
run = sys.argv[1]
for d in ("logs", "events", "ranks"):
    os.makedirs(os.path.join(run, d), exist_ok=True)
with open(os.path.join(run, "logs", "rank-0.log"), "w") as f:
    f.write("step 1\\n" + "x" * 70000 + "\\n")
with open(os.path.join(run, "events", "rank-0.jsonl"), "w") as f:
    f.write(json.dumps({"loss": 0.5}) + "\\n")
with open(os.path.join(run, "ranks", "rank-0.json"), "w") as f:
    json.dump({"rank": 0, "exit_code": 0}, f)
print("launcher says hi")
keys = ("PET_NODE_RANK", "JT_NODE_RANK", "PET_RDZV_CONF", "PET_RDZV_ENDPOINT")
print(json.dumps({k: os.environ.get(k) for k in keys}))
print(open(os.path.join(run, "code", "_jt", "cell.py")).read().strip())
sys.exit(3)
"""


def test_pod_program_unpacks_runs_and_mirrors_the_run_folder(tmp_path):
    from jupyter_trainer.nodes.prepare import snapshot_tarball
    from jupyter_trainer.rankside import kube_pod as pod

    code = run_dir_with_code(tmp_path, b"print('cell')\n") / "code"
    in_dir, pod_run, local = tmp_path / "in", tmp_path / "pod-run", tmp_path / "local"
    in_dir.mkdir()
    (in_dir / "snapshot.tar.gz").write_bytes(snapshot_tarball(code))
    (in_dir / "spec.json").write_text('{"params": {"lr": 1}}')
    env = {"PATH": os.environ["PATH"], "JOB_COMPLETION_INDEX": "1"}
    done = subprocess.run(
        [
            sys.executable,
            pod.__file__,
            str(pod_run),
            str(in_dir),
            "--",
            sys.executable,
            "-c",
            WRITER,
            str(pod_run),
        ],
        capture_output=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 3, done.stderr
    log = stream.PodLog(LocalFiles(str(local)), 1, "jt-digits-1-1-abcde")
    for _ in range(2):  # a stream read twice (a reconnect) writes everything once
        log.restart()
        for line in done.stdout.splitlines(keepends=True):
            log.feed(line)
    plain = [
        line.decode()
        for line in done.stdout.splitlines(keepends=True)
        if stream.split_marked(line) is None
    ]
    assert plain[0] == "launcher says hi\n"
    assert json.loads(plain[1]) == {
        "PET_NODE_RANK": None,
        "JT_NODE_RANK": "1",
        "PET_RDZV_CONF": "is_host=0",
        "PET_RDZV_ENDPOINT": None,
    }
    assert plain[2] == "print('cell')\n"
    for rel in ("logs/rank-0.log", "events/rank-0.jsonl", "ranks/rank-0.json"):
        assert (local / rel).read_bytes() == (pod_run / rel).read_bytes(), rel
    assert (pod_run / "spec.json").read_text() == '{"params": {"lr": 1}}'
    assert (local / "logs" / "launcher.log").read_text().splitlines()[
        0
    ] == "[jt-digits-1-1-abcde] launcher says hi"
    assert len((local / "logs" / "launcher.log").read_text().splitlines()) == 3


# A launcher whose rank forks a watcher, as death_watch does, and ends: the watcher, its
# parent gone, records the rank's end a moment later, after the launcher has exited.
ORPHANED_WATCHER = """
import os, sys, time
ranks = os.path.join(sys.argv[1], "ranks")
os.makedirs(ranks, exist_ok=True)
if os.fork() == 0:  # the rank
    rank = os.getpid()
    if os.fork() == 0:  # its watcher, which holds none of the launcher's pipes
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        while os.getppid() == rank:
            time.sleep(0.05)
        time.sleep(1.5)  # a loaded node
        with open(os.path.join(ranks, "rank-0.json.tmp"), "w") as f:
            f.write('{"rank": 0, "exited": 1.0}')
        os.rename(os.path.join(ranks, "rank-0.json.tmp"), os.path.join(ranks, "rank-0.json"))
        os._exit(0)
    os._exit(7)
os.wait()
sys.exit(1)
"""


def test_a_pod_ends_only_once_the_ranks_watchers_have_recorded(tmp_path):
    """The container's end kills whatever is left in it: the pod program waits for what its
    launcher left behind (a rank's death watcher, recording how the rank ended) and sends
    what it wrote before it exits."""
    from jupyter_trainer.rankside import kube_pod as pod

    in_dir, pod_run, local = tmp_path / "in", tmp_path / "pod-run", tmp_path / "local"
    in_dir.mkdir()
    (pod_run / "code").mkdir(parents=True)
    done = subprocess.run(
        [sys.executable, pod.__file__, str(pod_run), str(in_dir), "--"]
        + [sys.executable, "-c", ORPHANED_WATCHER, str(pod_run)],
        capture_output=True,
        env={"PATH": os.environ["PATH"], "PET_NODE_RANK": "1"},
        timeout=60,
    )
    assert done.returncode == 1, done.stderr
    log = stream.PodLog(LocalFiles(str(local)), 1, "jt-digits-1-1-abcde")
    for line in done.stdout.splitlines(keepends=True):
        log.feed(line)
    assert (local / "ranks" / "rank-0.json").read_text() == '{"rank": 0, "exited": 1.0}'


def test_a_pod_restarted_in_place_does_not_start_its_launcher_again(tmp_path):
    """A TrainJob's container that failed is restarted in place (``OnFailure``). Its second
    start must not run the launcher again over the first one's records (a loaded cluster
    restarts it before the supervisor has read them): it ends at once, silent, with the
    first launcher's exit code; another node's first start still runs."""
    from jupyter_trainer.rankside import kube_pod as pod

    in_dir, pod_run = tmp_path / "in", tmp_path / "pod-run"
    in_dir.mkdir()
    (pod_run / "code").mkdir(parents=True)
    count = tmp_path / "starts"
    launcher = f"open({str(count)!r}, 'a').write('x'); print('launcher ran'); raise SystemExit(7)"

    def start(node: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, pod.__file__, str(pod_run), str(in_dir), "--"]
            + [sys.executable, "-c", launcher],
            capture_output=True,
            env={"PATH": os.environ["PATH"], "PET_NODE_RANK": node},
            timeout=60,
        )

    first = start("1")
    assert (first.returncode, first.stdout) == (7, b"launcher ran\n")
    again = start("1")
    assert (again.returncode, again.stdout, again.stderr) == (7, b"", b"")
    assert count.read_text() == "x"
    other = start("0")
    assert other.returncode == 7 and count.read_text() == "xx"


def test_marked_lines_that_would_leave_the_run_folder_are_refused():
    from jupyter_trainer.rankside.kube_pod import MARK

    for rel in ("../x", "logs/../../x", "code/a.py", "/etc/passwd", "logs/a/b", 7):
        line = (MARK + json.dumps({"f": rel, "at": 0, "a": "eA=="}) + "\n").encode()
        assert stream.split_marked(line) is None
    assert stream.split_marked(b"an ordinary line\n") is None


def test_without_a_kubeconfig_auto_says_what_to_set(tmp_path):
    target = KubernetesTarget("k8s", {"image": IMAGE, "kubeconfig": str(tmp_path / "none")})
    with pytest.raises(TargetError, match="kubeconfig"):
        dry_run(target, make_spec(), run_dir_with_code(tmp_path))


def test_an_unreachable_cluster_is_named(tmp_path):
    config = tmp_path / "kubeconfig"
    config.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "c",
                "clusters": [{"name": "c", "cluster": {"server": "http://127.0.0.1:9"}}],
                "users": [{"name": "u", "user": {}}],
                "contexts": [
                    {"name": "c", "context": {"cluster": "c", "user": "u", "namespace": "team"}}
                ],
            }
        )
    )
    target = KubernetesTarget(
        "k8s", {"image": IMAGE, "kubeconfig": str(config), "connect_timeout": 2}
    )
    assert target.namespace() == "team"
    with pytest.raises(TargetError, match="reachable"):
        dry_run(target, make_spec(), run_dir_with_code(tmp_path))


def test_outputs_come_back_through_workdir_pvc_where_this_machine_sees_it(tmp_path):
    claim = tmp_path / "claim"
    (claim / "run-1" / "outputs" / "model").mkdir(parents=True)
    (claim / "run-1" / "outputs" / "model" / "weights.pt").write_bytes(b"w")
    target = KubernetesTarget(
        "k8s", {"image": IMAGE, "workdir_pvc": "runs", "workdir_local": str(claim)}
    )
    target._files = LocalFiles(str(tmp_path / "local"))
    (claim / "run-1" / "outputs" / "model" / "weights.pt").chmod(0o644)
    old = os.umask(0o027)  # a shared workspace's supervisor
    try:
        got = target.collect({"run_dir_remote": "/jt/runs/run-1"})
    finally:
        os.umask(old)
    assert got["copied"]["files"] == 1 and "runs" in got["outputs"]
    copied = tmp_path / "local" / "outputs" / "model" / "weights.pt"
    assert copied.read_bytes() == b"w"
    assert stat.S_IMODE(copied.stat().st_mode) == 0o640  # the pod's 0644, less the umask
    without = KubernetesTarget("k8s", {"image": IMAGE}).collect({"run_dir_remote": "/jt/run"})
    assert "workdir_pvc" in without["outputs"]
    with pytest.raises(TargetError, match="workdir_local"):
        KubernetesTarget("k8s", {"workdir_local": str(claim)})


def test_a_large_snapshot_is_written_onto_workdir_pvc_through_workdir_local(tmp_path):
    claim = tmp_path / "claim"
    claim.mkdir()
    big = os.urandom(1100 * 1024)
    spec, run = make_spec(), run_dir_with_code(tmp_path, big)
    with pytest.raises(TargetError, match="workdir_local"):
        dry_run(
            KubernetesTarget("k8s", {"image": IMAGE, "api": "job", "workdir_pvc": "runs"}),
            spec,
            run,
        )
    target = KubernetesTarget(
        "k8s", {"image": IMAGE, "api": "job", "workdir_pvc": "runs", "workdir_local": str(claim)}
    )
    (cm, svc, job) = yaml.safe_load_all(dry_run(target, spec, run))
    assert "binaryData" not in cm and cm["data"]["spec.json"]
    validate(job, None)
    plan = target.plan(spec, "digits-1", str(run), "gloo")
    target.stage(spec, plan, str(run))
    assert (claim / "digits-1" / "code" / "_jt" / "cell.py").read_bytes() == big
