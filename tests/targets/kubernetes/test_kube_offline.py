"""The kubernetes target without a cluster: its settings, dry runs, the pod program (pod.py)
run here as a real process, and a cluster that cannot be reached."""

from __future__ import annotations

import base64
import io
import json
import os
import re
import stat
import subprocess
import sys
import tarfile

import pytest
import yaml
from support.kube_manifest_cases import (
    IMAGE,
    dry_run,
    make_spec,
    run_dir_with_code,
    trainjob_schema,  # noqa: F401 (the fixture)
    validate,
)

from jupyter_trainer.core.errors import TargetError
from jupyter_trainer.core.spec import DataSpec
from jupyter_trainer.nodes.mirror import LocalFiles
from jupyter_trainer.targets.kubernetes import KubernetesTarget, stream
from jupyter_trainer.targets.kubernetes.config import KubeConfig
from jupyter_trainer.targets.registry import get_target

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
    from jupyter_trainer.rankside.programs import kube_pod as pod

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
    from jupyter_trainer.rankside.programs import kube_pod as pod

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
    from jupyter_trainer.rankside.programs import kube_pod as pod

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
    from jupyter_trainer.rankside.programs.kube_pod import MARK

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
