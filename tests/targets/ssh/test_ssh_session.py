"""A live session on two ssh nodes: its requests go down the nodes' follow sessions into
each node's own run folder, and the ranks' results come back by the same way."""

from __future__ import annotations

import pytest
from conftest import leftover

from jupyter_trainer.api import sessions as session_api
from jupyter_trainer.core.errors import CellFailed


@pytest.mark.slow
def test_a_session_on_two_ssh_nodes_runs_cells_pulls_and_stops(pair, home, capsys):
    live = session_api.start_session("remote", target="pair", nodes=2, procs=1, timeout=120)
    try:
        assert live.files.ready() == {0, 1}
        live.run(
            "import socket, torch, torch.distributed as dist\n"
            "t = torch.ones(1) * (dist.get_rank() + 1)\n"
            "dist.all_reduce(t)\n"
            "print('sum', t.item(), 'in', jt_dir)\n",
            namespace={"jt_dir": "notebook"},
        )
        out = capsys.readouterr().out
        assert "[rank 0] sum 3.0 in notebook" in out and "[rank 1] sum 3.0 in notebook" in out
        assert live.pull("t.item()", rank=None) == [3.0, 3.0]
        live.push(scale=10)
        live.run("t = t * scale")
        assert live.pull("t.item()", rank=1) == 30.0
        with pytest.raises(CellFailed, match="rank 1:") as failed:
            live.run("if dist.get_rank() == 1:\n    raise KeyError('only here')\n", cell=4)
        assert failed.value.ranks == [1] and "Cell In [4], line 2" in str(failed.value)
        assert live.pull("t.item()") == 30.0  # the session went on
    finally:
        status = live.stop()
    assert status == "completed"
    assert leftover(live.id) == []
