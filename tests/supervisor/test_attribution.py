"""Which death came first, from rank records and launcher output as real runs write them
(the fault suite, tests/supervisor/test_faults.py, makes them with real processes)."""

from __future__ import annotations

import math

from jupyter_trainer.supervisor import attribution as at

MPIRUN = """\
--------------------------------------------------------------------------
Primary job  terminated normally, but 1 process returned
a non-zero exit code. Per user-direction, the job has been aborted.
--------------------------------------------------------------------------
--------------------------------------------------------------------------
mpirun noticed that process rank 1 with PID 0 on node vm exited on signal 9 (Killed).
--------------------------------------------------------------------------
"""

TORCHRUN_TWO_NODES = """\
[n2] Failures:
[n2] <NO_OTHER_FAILURES>
[n2] ------------------------------------------------------------
[n2] Root Cause (first observed failure):
[n2] [0]:
[n2]   time      : 2026-11-23_13:49:21
[n2]   host      : vm
[n2]   rank      : 1 (local_rank: 0)
[n2]   exitcode  : -9 (pid: 19808)  (SIGKILL)
[n2]   error_file: <N/A>
[n2]   traceback : Signal 9 (SIGKILL) received by PID 19808
[n1]   rank      : 0 (local_rank: 0)
[n1]   exitcode  : 1 (pid: 19809)
"""

TORCHRUN_ONE_NODE = """\
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 16828)  (SIGTERM)
  rank      : 1 (local_rank: 1)
  exitcode  : -9 (pid: 16829)  (SIGKILL)
"""


def record(rank, **fields):
    return {"rank": rank, "pid": 1000 + rank, "host": "vm", "started": 1.0, **fields}


def test_the_launchers_words_name_signals():
    assert at.launcher_signals(MPIRUN) == {1: "SIGKILL"}
    assert at.launcher_signals(TORCHRUN_TWO_NODES) == {1: "SIGKILL"}
    assert at.launcher_signals(TORCHRUN_ONE_NODE) == {0: "SIGTERM", 1: "SIGKILL"}
    assert at.launcher_signals("Process 1 exit with status code 137.") == {1: "SIGKILL"}
    assert at.launcher_signals("Process 1 exit with status code 1.") == {}
    assert at.launcher_signals(None, "python", -9) == {0: "SIGKILL"}
    assert at.launcher_signals("", "python", 1) == {}


def test_torchruns_summary_gives_the_status_of_a_rank_that_exited_on_its_own():
    assert at.launcher_statuses(TORCHRUN_TWO_NODES) == {0: 1}
    assert at.launcher_statuses(TORCHRUN_ONE_NODE) == {}
    assert at.launcher_statuses(MPIRUN) == at.launcher_statuses(None) == {}


def test_a_status_the_watcher_could_not_read_comes_from_the_launcher():
    """A rank that called ``_exit(7)``, reaped by torchrun before its watcher could read the
    zombie's status: the watcher recorded only when it ended."""
    records = {2: record(2, exited=100.0), 3: record(3, exited=100.5, signal="SIGTERM")}
    unread = at.first_death(at.rank_deaths(records))
    assert unread.error("torchrun") == (
        "rank 2 ended without recording an exit (killed by a signal, for example by the "
        "out-of-memory killer); see logs/launcher.log"
    )
    told = at.first_death(at.rank_deaths(records, {3: "SIGTERM"}, {2: 7, 3: 1}))
    assert (told.rank, told.exit_status) == (2, 7)
    assert told.error("torchrun") == (
        "rank 2 ended without recording an exit (exited with code 7 before boot could record "
        "it); see logs/launcher.log"
    )
    signalled = {d.rank: d for d in at.rank_deaths(records, {3: "SIGTERM"}, {2: 7, 3: 1})}[3]
    assert (signalled.signal, signalled.exit_status) == ("SIGTERM", None)


def test_a_killed_rank_goes_before_the_peer_it_took_down_whatever_the_clock_says():
    # The peer raised 10 ms before the killed rank's watcher woke, but saw it dying already.
    records = {
        0: record(
            0,
            exit_code=1,
            failed_at=100.000,
            ended=100.002,
            exited=100.05,
            error="RuntimeError: Connection closed by peer",
            peers_gone=[1],
        ),
        1: record(1, exited=100.010, signal="SIGKILL"),
    }
    first = at.first_death(at.rank_deaths(records))
    assert (first.rank, first.how, first.signal, first.at) == (1, "killed", "SIGKILL", 100.010)
    assert first.error("mpirun") == (
        "rank 1 ended without recording an exit (killed by SIGKILL); see logs/launcher.log"
    )


def test_across_hosts_the_launchers_word_stands_in_for_what_a_peer_saw():
    records = {
        0: record(0, host="a", exit_code=1, failed_at=100.000, error="RuntimeError: reset"),
        1: record(1, host="b", exited=100.080),
    }
    assert at.first_death(at.rank_deaths(records)).rank == 0  # the clocks alone
    assert at.first_death(at.rank_deaths(records, {1: "SIGKILL"})).rank == 1
    records[1]["exited"] = 100.5  # too long after: rank 0 failed on its own
    assert at.first_death(at.rank_deaths(records, {1: "SIGKILL"})).rank == 0


def test_the_earliest_failure_wins_when_none_saw_another():
    records = {
        0: record(0, exit_code=143, signal="SIGTERM", ended=223.36, exited=223.44),
        1: record(
            1,
            exit_code=1,
            failed_at=220.74,
            ended=220.75,
            exited=223.37,
            error="RuntimeError: rank 1 gave up",
        ),
    }
    first = at.first_death(at.rank_deaths(records))
    assert (first.rank, first.how) == (1, "exception")
    assert first.error("torchrun") == "RuntimeError: rank 1 gave up"


def test_an_orphaned_rank_is_a_consequence_and_the_launcher_is_named():
    records = {0: record(0, exit_code=143, signal="SIGTERM", ended=50.001, orphaned=True)}
    first = at.first_death(at.rank_deaths(records))
    assert first.rank == 0 and first.caused_by([])
    launcher = at.launcher_death(-9, 50.002)
    assert launcher.rank is None and launcher.signal == "SIGKILL"
    assert launcher.error("horovod").startswith("the launcher (horovod) was killed by SIGKILL")
    assert at.launcher_death(1, 50.0) is None and at.launcher_death(None, None) is None


def test_a_rank_with_no_evidence_is_left_to_the_caller():
    records = {0: record(0), 1: record(1, exit_code=0, exited=3.0)}
    assert at.rank_deaths(records) == [] and at.unrecorded(records) == [0]
    said = at.rank_deaths(records, {0: "SIGKILL"})
    assert [(d.rank, d.at, d.signal) for d in said] == [(0, math.inf, "SIGKILL")]


def test_a_rank_that_recorded_exit_0_and_then_died_by_a_signal_is_named():
    """Its code finished, then native teardown aborted: the launcher only says "exit 1"."""
    records = {
        0: record(0, exit_code=0, ended=10.0, exited=10.01),
        1: record(1, exit_code=0, ended=10.0, exited=10.02, after_exit={"signal": "SIGABRT"}),
    }
    first = at.first_death(at.rank_deaths(records))
    assert (first.rank, first.how, first.signal, first.at) == (1, at.AFTER_EXIT, "SIGABRT", 10.02)
    assert first.error("torchrun").startswith(
        "rank 1 finished its code (it recorded exit code 0), then its process was killed by "
        "SIGABRT as it ended"
    )
    # The launcher's words alone (the watcher found the rank already reaped) name it too.
    aborted = TORCHRUN_ONE_NODE.replace("-15", "-6").replace("SIGTERM", "SIGABRT")
    words = at.launcher_signals(aborted)
    first = at.first_death(
        at.rank_deaths(
            {0: record(0, exit_code=0, exited=10.0), 1: record(1, exit_code=0, exited=10.0)}, words
        )
    )
    assert (first.rank, first.signal) == (0, "SIGABRT")
    # A rank that failed on its own before still goes first.
    records[0].update(exit_code=1, failed_at=9.0, error="RuntimeError: no")
    assert at.first_death(at.rank_deaths(records)).rank == 0


def test_torchruns_word_at_a_restart_names_the_killed_process_of_its_attempt():
    # torchrun's agent before it restarts the ranks: the watcher could not read how rank 1
    # died once the agent had reaped it, and the agent names it by pid
    log = (
        "E1128 00:46:07.465000 7525 torch/distributed/elastic/multiprocessing/api.py:1002] "
        "failed (exitcode: -9) local_rank: 1 (pid: 7535) of binary: /venv/bin/python\n"
    )
    killed = at.killed_processes(log)
    assert killed == {(7535, 1): "SIGKILL"}
    first = {0: record(0, pid=7534, local_rank=0, attempt=0, exit_code=143, signal="SIGTERM")}
    first[1] = record(1, pid=7535, local_rank=1, attempt=0, exited=5.0)
    again = {r: record(r, pid=7600 + r, local_rank=r, attempt=1, exit_code=0) for r in (0, 1)}
    assert at.killed_ranks(first, killed) == {1: "SIGKILL"}
    assert at.killed_ranks(again, killed) == {}
    death = at.first_death(at.rank_deaths(first, at.killed_ranks(first, killed)))
    assert death.rank == 1 and "killed by SIGKILL" in death.error("torchrun")
    assert at.launcher_signals(log, "torchrun", 0, first) == {1: "SIGKILL"}
