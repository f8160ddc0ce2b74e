"""A live session on two ssh nodes: its requests go down the nodes' follow sessions into
each node's own run folder, and the ranks' results come back by the same way."""

from __future__ import annotations

import pytest
from support.sessions import check_a_session_on


@pytest.mark.slow
def test_a_session_on_two_ssh_nodes_runs_cells_pulls_and_stops(pair, home, capsys):
    check_a_session_on("pair", nodes=2, procs=1, capsys=capsys)
