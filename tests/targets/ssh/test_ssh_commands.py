"""The ssh target's generated commands, golden-tested with hostile paths and values.

Pure: no sshd. A remote command must come back from the node's shell as exactly the argv
it was made from, so the shell tests here run each one through ``sh -c`` with a program
that prints its argv. Regenerate with JT_UPDATE_GOLDEN=1 after a deliberate change.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys

import pytest
from support import GOLDEN

from jupyter_trainer.core.errors import TargetError
from jupyter_trainer.core.spec import LaunchSpec
from jupyter_trainer.launchers.table import LaunchPlan
from jupyter_trainer.nodes.commands import (
    BOOTSTRAP,
    PROBE,
    agent_command,
    bootstrap_command,
    probe_command,
    snapshot_dir_name,
)
from jupyter_trainer.nodes.folder import Node
from jupyter_trainer.nodes.ssh import SshClient, classify, control_dir
from jupyter_trainer.targets.ssh.commands import (
    SshConfig,
    hop_config,
    hop_wrapper,
    node_launches,
    render_launches,
)

HOSTILE = "/scratch/we ird/'q\"s'/$(touch pwned)/`id`/new\nline"
RUN_ID = "digits-20261122-101500-abc123"
HOSTILE_ENV = {"NCCL_SOCKET_IFNAME": "eth0", "WEIRD": 'x\'; rm -rf ~ $(id) `id` "y"\n'}


def nodes(count: int = 2) -> list[Node]:
    return [
        Node(
            i,
            f"gpu{i + 1}",
            f"10.0.0.{i + 1}",
            f"{HOSTILE}/work",
            f"{HOSTILE}/venv/bin/python",
            {
                "port": [str(2200 + i)],
                "user": ["tr ainer"],
                "identityfile": [f"/home/u/.ssh/id %{i}"],
                "stricthostkeychecking": ["true"],
            },
        )
        for i in range(count)
    ]


def plan(first: Node) -> LaunchPlan:
    run_dir = first.run_dir(RUN_ID)
    return LaunchPlan(
        run_id=RUN_ID,
        run_dir=run_dir,
        python=first.python,
        boot=f"{run_dir}/code/_jt/boot.py",
        entry="_jt/cell.py",
        args=("--lr", "'; rm -rf ~'", "$HOME"),
        backend="gloo",
        master_addr=first.address,
        master_port=29411,
        run_as_root=True,
        oversubscribe=True,
        extra_env=HOSTILE_ENV,
    )


CASES = {
    "torchrun_2nodes": LaunchSpec("torchrun", nodes=2, procs=4),
    "torchrun_1node": LaunchSpec("torchrun", nodes=1, procs=2),
    "mpirun_2nodes": LaunchSpec("mpirun", nodes=2, procs=2),
    "horovod_gloo_2nodes": LaunchSpec("horovod", nodes=2, procs=2),
    "horovod_mpi_2nodes": LaunchSpec("horovod", nodes=2, procs=2, backend="mpi"),
    "python": LaunchSpec("python"),
}


def launches(case: str):
    launch = CASES[case]
    found = nodes(launch.nodes)
    return node_launches(
        launch,
        plan(found[0]),
        found,
        real_ssh="/usr/bin/ssh",
        network_interfaces=("eth0",) if "horovod" in case else (),
    )


def test_mpirun_marks_remote_daemons_only_through_a_plain_path():
    plain = [
        Node(i, f"gpu{i + 1}", f"10.0.0.{i + 1}", "/scratch/jt", "/opt/py/bin/python")
        for i in range(2)
    ]
    for workdir, marked in (("/scratch/jt", True), (HOSTILE, False)):
        found = [Node(n.index, n.host, n.address, workdir, n.python) for n in plain]
        first = node_launches(CASES["mpirun_2nodes"], plan(found[0]), found)[0]
        agent = first.command.env.get("OMPI_MCA_orte_launch_agent")
        assert (agent == f"{workdir}/runs/{RUN_ID}/bin/orted") is marked
        assert ("bin/orted" in first.files) is marked
        if marked:
            assert f"JT_RUN_ID={RUN_ID}\n" in first.files["bin/orted"]


@pytest.mark.parametrize("case", sorted(CASES))
def test_node_launches_match_golden(case):
    text = render_launches(launches(case), "sha256-" + "0" * 64)
    golden = GOLDEN / f"ssh_{case}.txt"
    if os.environ.get("JT_UPDATE_GOLDEN"):
        golden.write_text(text)
    assert text.splitlines() == golden.read_text().splitlines()


def test_torchrun_runs_once_per_node_with_node_0_hosting_the_rendezvous():
    first, second = launches("torchrun_2nodes")
    for item, rank in ((first, 0), (second, 1)):
        argv = item.command.argv
        assert f"--node-rank={rank}" in argv and f"--rdzv-conf=is_host={int(rank == 0)}" in argv
        assert "--rdzv-endpoint=10.0.0.1:29411" in argv  # node 0's address, never an alias
        assert f"--local-addr=10.0.0.{rank + 1}" in argv and "--nnodes=2" in argv
        assert item.command.env["JT_RUN_DIR"] == f"{HOSTILE}/work/runs/{RUN_ID}"  # the REMOTE dir
        assert item.command.env["JT_NODE_RANK"] == str(rank)
        assert item.command.env["WEIRD"] == HOSTILE_ENV["WEIRD"]  # the target's env, unchanged


def test_mpirun_and_horovod_start_on_node_0_only_and_hop_through_the_wrapper():
    for case in ("mpirun_2nodes", "horovod_gloo_2nodes", "horovod_mpi_2nodes"):
        first, second = launches(case)
        assert second.command is None and second.files == first.files
        argv = first.command.argv
        assert "10.0.0.1:2,10.0.0.2:2" in argv
        assert first.path_prepend == (f"{first.run_dir}/bin",)
        assert first.command.env["OMPI_MCA_plm_rsh_no_tree_spawn"] == "1"
        assert "Host 10.0.0.2\n  port 2201\n" in first.files["ssh_config"]


def test_remote_commands_survive_the_shell_unchanged(tmp_path):
    """Run each command through sh -c, with a 'python' that prints its argv."""
    folder = tmp_path / "we ird $(x) 'q'"
    folder.mkdir()
    printer = folder / 'py"thon'
    printer.write_text(f"#!{sys.executable}\nimport json, sys\nprint(json.dumps(sys.argv[1:]))\n")
    printer.chmod(0o755)
    args = {"run_id": "r'; rm -rf ~", "x": HOSTILE_ENV["WEIRD"], "n": [1, "$(id)"]}
    for command, expected in (
        (
            bootstrap_command(str(printer), HOSTILE, "jt-node-1.pyz", "preflight", args),
            ["-c", BOOTSTRAP, HOSTILE, "jt-node-1.pyz", "preflight"],
        ),
        (
            agent_command(str(printer), f"{HOSTILE}/bin/a.pyz", HOSTILE, "stop", args),
            [f"{HOSTILE}/bin/a.pyz", "--workdir", HOSTILE, "stop"],
        ),
    ):
        out = subprocess.run(["sh", "-c", command], capture_output=True, text=True, check=True)
        got = json.loads(out.stdout)
        assert got[:-1] == expected and json.loads(got[-1]) == args
        assert shlex.split(command)[1:] == got
    out = subprocess.run(
        ["sh", "-c", probe_command(str(printer), HOSTILE, args)],
        capture_output=True,
        text=True,
        check=True,
    )
    got = json.loads(out.stdout)  # a dry run's pre-flight: nothing installed, probe set
    assert got[:-1] == ["-c", PROBE, HOSTILE, "preflight"]
    assert json.loads(got[-1]) == {**args, "probe": True}


def test_hop_wrapper_and_config_match_golden_and_are_valid(tmp_path):
    first = launches("mpirun_2nodes")[0]
    text = "bin/ssh:\n" + first.files["bin/ssh"] + "ssh_config:\n" + first.files["ssh_config"]
    golden = GOLDEN / "ssh_hop.txt"
    if os.environ.get("JT_UPDATE_GOLDEN"):
        golden.write_text(text)
    assert text.splitlines() == golden.read_text().splitlines()
    wrapper = tmp_path / "ssh"
    wrapper.write_text(first.files["bin/ssh"])
    assert subprocess.run(["sh", "-n", str(wrapper)]).returncode == 0
    # The generated config is one ssh itself accepts (-G parses it and resolves a host).
    config = tmp_path / "config"
    config.write_text(first.files["ssh_config"])
    out = subprocess.run(
        ["ssh", "-F", str(config), "-G", "10.0.0.2"], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert "port 2201" in out.stdout and "user tr ainer" in out.stdout
    assert "identityfile /home/u/.ssh/id %1" in out.stdout  # as -G gave it, tokens kept


def test_hop_config_refuses_what_it_cannot_quote():
    bad = Node(0, "a", "10.0.0.1", "/w", "/p", {"user": ['x" y']})
    with pytest.raises(TargetError, match="cannot be written into an ssh config"):
        hop_config([bad])


def test_wrapper_quotes_its_paths():
    text = hop_wrapper("/usr/b in/ssh", "/w w/$(id)/ssh_config")
    assert text.splitlines()[1] == "exec '/usr/b in/ssh' -F '/w w/$(id)/ssh_config' \"$@\""


def test_client_argv_matches_golden(tmp_path):
    client = SshClient(
        "gpu1",
        "/home/u/.jupyter_trainer/ssh",
        (("ProxyJump", "bastion"), ("IdentityFile", "~/.ssh/id gpu")),
        "/home/u/.ssh/config",
        7,
        120,
    )
    text = (
        "\n".join(
            client.argv(
                agent_command("/p y/python", "/w/bin/a.pyz", "/w", "leftovers", {"run_id": "r1"})
            )
        )
        + "\n"
    )
    golden = GOLDEN / "ssh_client.txt"
    if os.environ.get("JT_UPDATE_GOLDEN"):
        golden.write_text(text)
    assert text.splitlines() == golden.read_text().splitlines()
    assert client.argv()[-2:] == ["--", "gpu1"]  # a destination is never read as an option


def test_control_dir_fits_a_unix_socket(tmp_path):
    short = control_dir(tmp_path / "h")
    assert short == tmp_path / "h" / "ssh" or len(str(short)) + 41 <= 90
    deep = control_dir(tmp_path / ("x" * 80) / "home with space")
    assert len(str(deep)) + 41 <= 90 and " " not in str(deep)
    assert deep.stat().st_mode & 0o077 == 0


@pytest.mark.parametrize(
    "config, match",
    [
        ({}, "hosts must be a non-empty list"),
        ({"hosts": []}, "hosts must be a non-empty list"),
        ({"hosts": ["-oProxyCommand=x"]}, "is not an ssh destination"),
        ({"hosts": ["a b"]}, "is not an ssh destination"),
        ({"hosts": ["a", "a"]}, "listed twice"),
        ({"hosts": [{"workdir": "/x"}]}, "a host table takes host"),
        ({"hosts": ["a"], "hostz": 1}, r"unknown key\(s\) \['hostz'\]"),
        ({"hosts": ["a"], "gpus_per_node": "8"}, "gpus_per_node must be a whole number"),
        ({"hosts": ["a"], "env": {"1BAD": "x"}}, "env must be a table"),
        ({"hosts": ["a"], "ssh_options": "Port=22"}, "ssh_options must be a table"),
        ({"hosts": ["a"], "ssh_options": {"Port": 'x"y'}}, "is not valid"),
        ({"hosts": ["a"], "connect_timeout": 0}, "connect_timeout must be a whole number"),
        ({"hosts": ["a"], "workdir": "a\nb"}, "workdir must be a non-empty single-line string"),
    ],
)
def test_bad_config_is_refused(config, match):
    with pytest.raises(TargetError, match=match):
        SshConfig.from_config("pair", config)


def test_the_issue_config_is_accepted():
    cfg = SshConfig.from_config(
        "pair",
        {
            "hosts": ["gpu1", {"host": "gpu2", "workdir": "/other", "address": "10.1.0.2"}],
            "workdir": "/scratch/jt",
            "gpus_per_node": 8,
            "env": {"NCCL_SOCKET_IFNAME": "eth0"},
            "ssh_options": {"ServerAliveInterval": 2, "ForwardAgent": True},
        },
    )
    assert [h.host for h in cfg.hosts] == ["gpu1", "gpu2"] and cfg.hosts[1].workdir == "/other"
    assert cfg.ssh_options == (("ServerAliveInterval", "2"), ("ForwardAgent", "true"))


def test_snapshot_names_and_ssh_errors():
    assert snapshot_dir_name("sha256:ab12") == "sha256-ab12"
    with pytest.raises(TargetError):
        snapshot_dir_name("sha256:../../etc")
    assert classify("n1", 255, "root@x: Permission denied (publickey).").startswith(
        "authentication failed"
    )
    assert classify(
        "n1", 255, "ssh: connect to host 10.0.0.9 port 22: Connection timed out"
    ).startswith("it is unreachable")
    assert classify("n1", 255, "connect to host 127.0.0.4 port 22: Connection refused").startswith(
        "it refused the connection"
    )
