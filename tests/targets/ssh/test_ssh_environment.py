"""Named environments on the ssh target: the run's lock is built on every node with the
``build.py`` sent along, cached there, and checked with the environment's own python."""

from __future__ import annotations

import pytest
from conftest import leftover
from support.ssh_hosts import ALIASES

from jupyter_trainer.api import runs as api
from jupyter_trainer.core.errors import RunFailed

LAYERED = """%%environment nodes
inherit: true          # torch comes from the node's python
pip:
  - tomli==2.0.1       # the node's python does not have tomli at all
  - six==1.16.0        # it has six 1.17.0: the environment's wins
env:
  ENV_MARK: "from the environment"
"""

TRAIN = """%%train --target pair --nodes 2 --procs 1 --env nodes --name ssh-env
import os, sys
import six, tomli
import torch, torch.distributed as dist
from importlib.metadata import version
dist.init_process_group()
t = torch.ones(1)
dist.all_reduce(t)
print("tomli", version("tomli"), "six", six.__version__, "mark", os.environ["ENV_MARK"],
      "sum", t.item(), "python", sys.executable, flush=True)
dist.destroy_process_group()
"""


def train(ip, source: str):
    result = ip.run_cell(source, store_history=True)
    assert result.success, result.error_in_exec
    return result.result


def test_environment_is_built_on_every_node_then_reused(pair, home, ip, tmp_path):
    assert ip.run_cell(LAYERED, store_history=True).success
    run = train(ip, TRAIN)
    assert run.status == "completed"
    venvs = tmp_path / "remote" / "envs" / "venvs"
    for rank in (0, 1):
        log = run.logs(rank)
        assert "tomli 2.0.1 six 1.16.0 mark from the environment sum 2.0" in log
        python = log.split("python ", 1)[1].split()[0]
        assert python.startswith(str(venvs)), python
    env = run.state["environment"]
    assert env["name"] == "nodes" and env["built"] is True
    assert set(env["nodes"]) == set(ALIASES)
    assert env["python"].startswith(str(venvs)) and env["torch"]
    assert {e["env_id"] for e in env["nodes"].values()} == {env["env_id"]}

    again = train(ip, TRAIN.replace("ssh-env", "ssh-env-again"))
    assert again.status == "completed"
    assert again.state["environment"]["built"] is False
    assert not any(e["built"] for e in again.state["environment"]["nodes"].values())
    assert "(cached)" in (again.store.existing(again.id).logs / "launcher.log").read_text()
    assert leftover(run.id) == [] and leftover(again.id) == []


def test_an_import_the_environment_lacks_stops_the_run_naming_the_node(pair, home, ip):
    lean = "%%environment lean\ninherit: false\npip:\n  - six==1.16.0\n"
    assert ip.run_cell(lean, store_history=True).success
    run = api.submit(
        "import torch\nprint('never')",
        target="pair",
        nodes=2,
        procs=1,
        env="lean",
        name="ssh-env-lean",
    )
    with pytest.raises(RunFailed) as failed:
        run.wait(timeout=300)
    message = str(failed.value)
    assert "cannot import torch" in message and "n1" in message and "n2" in message
    assert "nothing was launched" in message
    logs = run.store.existing(run.id).logs
    assert not list(logs.glob("rank-*.log"))
    assert leftover(run.id) == []


def test_a_rerun_whose_lock_is_not_in_ones_own_locks_locks_it_again(pair, home, ip):
    """A colleague's run started again in a workspace names a lock that is theirs, not in
    the rerunner's locks: it is made again from the definition at the recorded version."""
    import shutil

    from jupyter_trainer.environment import lock

    small = "%%environment small\ninherit: true\npip:\n  - six==1.16.0\n"
    assert ip.run_cell(small, store_history=True).success
    source = "import six\nprint('six', six.__version__)"
    run = api.submit(source, target="pair", nodes=1, procs=1, env="small", name="ssh-relock")
    run.wait(timeout=300)
    key = run.spec.env.lock
    shutil.rmtree(lock.locks_dir(home) / key)
    again = api.rerun(run.id, wait=True)
    assert again.status == "completed"
    assert "six 1.16.0" in again.logs(0)
    assert (lock.locks_dir(home) / key / "lock.json").is_file()
    assert leftover(run.id) == [] and leftover(again.id) == []
