"""``add_target``: the core of ``%train target add``, without any front end."""

from __future__ import annotations

import pytest
import tomllib

from jupyter_trainer.core.errors import TargetError
from jupyter_trainer.targets import configured_targets, get_target
from jupyter_trainer.targets.registry import add_target, parse_settings
from jupyter_trainer.targets.ssh.target import SshTarget

ISSUE = dict(
    hosts=["gpu1", "gpu2"],
    workdir="/scratch/jt",
    gpus_per_node=8,
    env={"NCCL_SOCKET_IFNAME": "eth0"},
)


def test_the_issue_target_is_written_and_usable(home):
    path = add_target("pair", "ssh", home=home, **ISSUE)
    assert path == home / "targets.toml"
    assert tomllib.loads(path.read_text())["targets"]["pair"] == {"kind": "ssh", **ISSUE}
    assert configured_targets(home)["pair"]["hosts"] == ["gpu1", "gpu2"]
    target = get_target("pair", home)
    assert isinstance(target, SshTarget) and target.gpus_per_node() == 8
    assert target.cfg.env == {"NCCL_SOCKET_IFNAME": "eth0"}


def test_other_targets_and_comments_are_kept(home):
    home.mkdir(parents=True)
    (home / "targets.toml").write_text(
        '# my cluster\n[targets.cluster]\nkind = "slurm"\npartition = "gpu"  # big ones\n\n'
        '[targets.pair]\nkind = "ssh"\nhosts = ["old"]\n[targets.pair.env]\nA = "1"\n'
    )
    add_target(
        "pair",
        "ssh",
        home=home,
        replace=True,
        hosts=["n1", {"host": "n2", "python": "/p"}],
        ssh_options={"Port": 2222},
        env={"Q": 'a"b\\c\nd $(id)'},
    )
    text = (home / "targets.toml").read_text()
    assert text.startswith("# my cluster\n") and 'partition = "gpu"  # big ones' in text
    targets = configured_targets(home)
    assert targets["cluster"] == {"kind": "slurm", "partition": "gpu"}
    assert targets["pair"]["hosts"] == ["n1", {"host": "n2", "python": "/p"}]
    assert targets["pair"]["env"] == {"Q": 'a"b\\c\nd $(id)'}  # no [targets.pair.env] left over
    assert not list(home.glob(".targets.toml*"))  # the temporary file is gone


@pytest.mark.parametrize(
    "name, kind, config, match",
    [
        ("pair", "ssh", {"hosts": ["-oProxyCommand=id"]}, "is not an ssh destination"),
        ("pair", "ssh", {"hosts": ["a"], "gpus": 8}, r"unknown key\(s\) \['gpus'\]"),
        ("pair", "sshh", {"hosts": ["a"]}, "unknown target kind 'sshh'; registered kinds: .*ssh"),
        ("local", "ssh", {"hosts": ["a"]}, "built in"),
        ("bad name", "ssh", {"hosts": ["a"]}, "invalid target name"),
        ("cl", "slurm", {"time": "two hours"}, "not a Slurm time limit"),
        ("pair", "ssh", {"hosts": ["a"], "env": {"X": object()}}, "cannot be stored"),
    ],
)
def test_invalid_targets_are_refused_and_nothing_is_written(home, name, kind, config, match):
    with pytest.raises(TargetError, match=match):
        add_target(name, kind, home=home, **config)
    assert not (home / "targets.toml").exists()


def test_an_existing_target_is_replaced_only_when_asked(home):
    add_target("pair", "ssh", home=home, hosts=["a"])
    with pytest.raises(TargetError, match="already exists"):
        add_target("pair", "ssh", home=home, hosts=["b"])
    assert configured_targets(home)["pair"]["hosts"] == ["a"]
    add_target("pair", "ssh", home=home, replace=True, hosts=["b"])
    assert configured_targets(home)["pair"]["hosts"] == ["b"]


def test_key_value_settings_as_a_magic_would_pass_them(home):
    settings = parse_settings(
        [
            'hosts=["gpu1", "gpu2"]',
            "workdir=/scratch/jt",
            "gpus_per_node=8",
            'env={ NCCL_SOCKET_IFNAME = "eth0" }',
        ]
    )
    assert settings == ISSUE
    add_target("pair", "ssh", home=home, **settings)
    assert configured_targets(home)["pair"] == {"kind": "ssh", **ISSUE}
    with pytest.raises(TargetError, match="write KEY=VALUE"):
        parse_settings(["hosts"])


def test_bare_lists_tables_and_times_as_a_shell_leaves_them():
    assert parse_settings(
        [
            "hosts=[gpu1,gpu2]",
            "env={NCCL_SOCKET_IFNAME=eth0,GLOO_SOCKET_IFNAME=lo}",
            "sbatch=[--qos=high, --constraint=a100]",
            "time=02:00:00",
            "gpus_per_node=8",
            "ssh_options={}",
        ]
    ) == {
        "hosts": ["gpu1", "gpu2"],
        "env": {"NCCL_SOCKET_IFNAME": "eth0", "GLOO_SOCKET_IFNAME": "lo"},
        "sbatch": ["--qos=high", "--constraint=a100"],
        "time": "02:00:00",
        "gpus_per_node": 8,
        "ssh_options": {},
    }
    with pytest.raises(TargetError, match=r"a table is \{KEY=VALUE,...\}"):
        parse_settings(["env={NCCL_SOCKET_IFNAME}"])


def test_target_add_in_a_real_ipython_shell(ip, home, capsys):
    ip.run_line_magic(
        "train",
        "target add pair --kind ssh hosts=[gpu1,gpu2] workdir=/scratch/jt "
        "gpus_per_node=8 env={NCCL_SOCKET_IFNAME=eth0}",
    )
    ip.run_line_magic(
        "train",
        "target add cluster --kind slurm --replace partition=gpu "
        "time=02:00:00 'sbatch=[\"--qos=high\"]'",
    )
    assert configured_targets(home)["pair"] == {"kind": "ssh", **ISSUE}
    assert configured_targets(home)["cluster"] == {
        "kind": "slurm",
        "partition": "gpu",
        "time": "02:00:00",
        "sbatch": ["--qos=high"],
    }
    ip.run_line_magic("train", "targets")
    listed = capsys.readouterr().out
    assert "pair             ssh      hosts=['gpu1', 'gpu2']" in listed and "cluster" in listed
    with pytest.raises(TargetError, match="already exists .*--replace"):
        ip.run_line_magic("train", "target add pair --kind ssh hosts=[gpu3]")
    with pytest.raises(TargetError, match=r"unknown key\(s\) \['bogus'\]"):
        ip.run_line_magic("train", "target add other --kind slurm bogus=1")
    from jupyter_trainer.core.errors import SpecError

    with pytest.raises(SpecError, match="unrecognized arguments: --bogus"):
        ip.run_line_magic("train", "target add other --kind ssh hosts=[a] --bogus")
    assert set(configured_targets(home)) == {"local", "pair", "cluster"}
    assert configured_targets(home)["pair"]["hosts"] == ["gpu1", "gpu2"]
