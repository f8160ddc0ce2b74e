"""How a run ended, decided from its evidence alone (``supervisor.verdict``): no processes.

Each case gives ``decide`` what the supervisor would have gathered once every process of
the run is gone (ranks' own records, the launcher's exit and words, the scheduler's report,
a cancel request, a full disk) and checks the status, the error and who failed first.
"""

from __future__ import annotations

from typing import Any

from jupyter_trainer.supervisor import attribution, verdict


def evidence(**given: Any) -> verdict.Evidence:
    fields: dict[str, Any] = {
        "outcome": {"launcher_exit": 0},
        "records": {0: {"exit_code": 0}, 1: {"exit_code": 0}},
        "launcher": "torchrun",
        "launcher_exit": 0,
        "launcher_death": None,
        "world_size": 2,
    }
    fields.update(given)
    return verdict.Evidence(**fields)


def test_every_rank_exiting_zero_completes():
    assert verdict.decide(evidence()) == ("completed", {})


def test_a_cancel_request_cancels_with_its_reason():
    status, why = verdict.decide(
        evidence(
            outcome={},
            records={0: {"exit_code": None}},
            launcher_exit=-15,
            cancel_reason="canceled by user",
        )
    )
    assert (status, why) == ("canceled", {"reason": "canceled by user"})


def test_an_error_of_the_watch_loop_wins_over_a_cancel():
    status, why = verdict.decide(
        evidence(
            outcome={"error": "loss became nan at step 3 on rank 1", "failed_rank": 1},
            cancel_reason="supervisor received SIGTERM",
        )
    )
    assert status == "failed"
    assert why == {
        "error": "loss became nan at step 3 on rank 1",
        "traceback": None,
        "failed_rank": 1,
    }


def test_the_rank_that_raised_first_is_named_not_the_peer_that_failed_after_it():
    records = {
        0: {
            "exit_code": 1,
            "failed_at": 100.5,
            "error": "RuntimeError: connection closed by peer",
            "traceback": "peer tb",
        },
        1: {
            "exit_code": 1,
            "failed_at": 100.0,
            "error": "ValueError: bad batch",
            "traceback": "tb1",
        },
    }
    status, why = verdict.decide(
        evidence(outcome={"launcher_exit": 1}, records=records, launcher_exit=1)
    )
    assert status == "failed"
    assert why["failed_rank"] == 1
    assert why["error"] == "ValueError: bad batch"
    assert why["traceback"] == "tb1"
    assert why["failure"] == {"rank": 1, "how": "exception", "at": 100.0, "signal": None}


def test_a_rank_that_saw_its_peer_dying_is_a_consequence_even_when_earlier():
    records = {
        0: {"exit_code": 1, "failed_at": 99.0, "error": "gloo: peer gone", "peers_gone": [1]},
        1: {"exit_code": None, "exited": 99.1, "signal": "SIGKILL"},
    }
    status, why = verdict.decide(
        evidence(outcome={"launcher_exit": 1}, records=records, launcher_exit=1)
    )
    assert status == "failed"
    assert why["failed_rank"] == 1
    assert why["error"].startswith("rank 1 ended without recording an exit (killed by SIGKILL)")


def test_the_launchers_words_name_the_signal_a_watcher_could_not_read():
    records = {0: {"exit_code": 0}, 1: {"exit_code": None, "exited": 50.0}}
    status, why = verdict.decide(
        evidence(
            outcome={"launcher_exit": 1},
            records=records,
            launcher_exit=1,
            launcher_words={1: "SIGSEGV"},
            log_tail="exitcode : -11",
        )
    )
    assert status == "failed"
    assert why["failure"]["signal"] == "SIGSEGV"
    assert "killed by SIGSEGV" in why["error"]
    assert why["traceback"] == "exitcode : -11"  # a rank killed by a signal has no traceback


def test_a_launcher_killed_before_any_rank_failed_is_the_cause():
    records = {0: {"exit_code": None, "exited": 20.0, "signal": "SIGTERM"}}
    death = attribution.launcher_death(-9, 10.0)
    status, why = verdict.decide(
        evidence(
            outcome={"launcher_exit": -9},
            records=records,
            launcher_exit=-9,
            launcher_death=death,
            world_size=1,
        )
    )
    assert status == "failed"
    assert "failed_rank" not in why
    assert why["error"].startswith("the launcher (torchrun) was killed by SIGKILL before any rank")


def test_the_schedulers_reason_wins_over_the_sigterm_its_ranks_got():
    records = {0: {"exit_code": None, "exited": 5.0, "signal": "SIGTERM", "ended": 5.0}}
    status, why = verdict.decide(
        evidence(
            outcome={"launcher_exit": 143},
            records=records,
            launcher_exit=143,
            report={"error": "the job hit its time limit (TIMEOUT)"},
            log_tail="slurmstepd: CANCELLED DUE TO TIME LIMIT",
            world_size=1,
        )
    )
    assert (status, why["error"]) == ("failed", "the job hit its time limit (TIMEOUT)")
    assert why["traceback"] == "slurmstepd: CANCELLED DUE TO TIME LIMIT"


def test_a_full_disk_is_the_cause_of_ranks_failing_to_write():
    records = {0: {"exit_code": 1, "failed_at": 1.0, "error": "OSError: [Errno 28]"}}
    status, why = verdict.decide(
        evidence(
            outcome={"launcher_exit": 1},
            records=records,
            launcher_exit=1,
            world_size=1,
            disk_full="the run store's disk is full",
        )
    )
    assert (status, why["error"]) == ("failed", "the run store's disk is full")


def test_a_full_disk_does_not_fail_a_run_that_ended_well():
    assert verdict.decide(evidence(disk_full="the disk filled"))[0] == "completed"


def test_a_rank_that_left_no_record_of_its_end_is_named_as_killed():
    records = {0: {"exit_code": 0}, 1: {"started": 1.0}}
    status, why = verdict.decide(
        evidence(outcome={"launcher_exit": 1}, records=records, launcher_exit=1, log_tail="x")
    )
    assert status == "failed"
    assert why["failed_rank"] == 1
    assert why["error"].startswith("rank 1 ended without recording an exit (killed by a signal")


def test_a_rank_that_ended_unrecorded_with_no_status_to_read_counts_only_if_the_launcher_failed():
    """``os._exit(0)`` skips the rank's own record of its end, and a zero status is what an
    unreadable one shows too: the launcher's exit code 0 says the rank ended well."""
    records = {0: {"exit_code": 0, "exited": 2.0}, 1: {"started": 1.0, "exited": 1.5}}
    assert verdict.decide(evidence(records=records)) == ("completed", {})
    status, why = verdict.decide(
        evidence(outcome={"launcher_exit": 1}, records=records, launcher_exit=1, log_tail="x")
    )
    assert (status, why["failed_rank"]) == ("failed", 1)
    killed = {**records, 1: {**records[1], "signal": "SIGKILL"}}
    assert verdict.decide(evidence(records=killed))[0] == "failed"


def test_a_launcher_that_failed_with_no_rank_to_blame():
    status, why = verdict.decide(
        evidence(outcome={"launcher_exit": 2}, launcher_exit=2, log_tail="usage: torchrun")
    )
    assert (status, why) == (
        "failed",
        {"error": "the launcher exited with code 2", "traceback": "usage: torchrun"},
    )
    status, why = verdict.decide(
        evidence(outcome={"launcher_exit": 2}, launcher_exit=2, records={})
    )
    assert why["error"] == (
        "the launcher exited with code 2 before any rank recorded its start; see logs/launcher.log"
    )
    status, why = verdict.decide(
        evidence(
            outcome={"launcher_exit": 1},
            launcher_exit=1,
            records={0: {"exit_code": 0}},
            world_size=2,
        )
    )
    assert why["error"] == (
        "the launcher exited with code 1 when only 1 of 2 ranks had recorded their start; see "
        "logs/launcher.log"
    )


def test_fewer_ranks_than_the_world_size_fails():
    status, why = verdict.decide(evidence(records={0: {"exit_code": 0}}, world_size=4))
    assert (status, why["error"]) == ("failed", "only 1 of 4 ranks started")


def test_a_crash_in_native_teardown_after_exit_zero_counts_only_if_the_launcher_failed():
    late = {0: {"exit_code": 0, "exited": 3.0, "after_exit": {"signal": "SIGABRT"}}}
    ok = evidence(records={**late, 1: {"exit_code": 0}})
    assert verdict.decide(ok)[0] == "completed"
    status, why = verdict.decide(
        evidence(
            outcome={"launcher_exit": 1},
            records={**late, 1: {"exit_code": 0}},
            launcher_exit=1,
        )
    )
    assert status == "failed"
    assert why["failure"]["how"] == attribution.AFTER_EXIT
    assert "in native teardown" in why["error"]


def test_a_rank_stopped_after_another_failed_but_the_launcher_did_not_stop():
    status, why = verdict.decide(
        evidence(
            outcome={"stopped_after_rank_failure": True},
            records={0: {"exit_code": 0}, 1: {"exit_code": 3, "failed_at": 7.0}},
            launcher="mpirun",
            launcher_exit=None,
        )
    )
    assert status == "failed"
    assert (why["failed_rank"], why["error"]) == (1, "rank 1 exited with code 3")


def test_while_the_run_goes_a_rank_stopped_by_sigterm_is_no_failure_of_its_own():
    records = {
        0: {"exit_code": -15, "signal": "SIGTERM", "ended": 5.0},  # recorded its SIGTERM
        1: {"exit_code": 0, "exited": 6.0, "after_exit": {"signal": "SIGTERM"}},
    }
    assert attribution.first_own_failure(records, relaunches=0) is None
    records[2] = {"exit_code": 1, "failed_at": 7.0, "error": "ValueError: x"}
    found = attribution.first_own_failure(records, relaunches=0)
    assert found is not None and (found.rank, found.how) == (2, "exception")


def test_while_the_run_goes_only_the_current_attempt_counts():
    records = {0: {"exit_code": 1, "failed_at": 1.0, "attempt": 0}, 1: {"attempt": 1}}
    assert attribution.first_own_failure(records, relaunches=1) is None
    assert attribution.first_own_failure({0: records[0]}, relaunches=0) is not None


GLOO_LOST = (
    "RuntimeError: Gloo connectFullMesh failed with [gloo/transport/tcp/pair.cc:553] "
    "Connection closed by peer [127.0.0.1]:8324. This is typically caused by a remote "
    "worker crashing."
)


def test_a_rank_that_lost_its_peer_says_what_the_peer_did():
    """The records of a real run on a loaded machine: rank 1 ended well while rank 0 was
    still making the group. The error names rank 0's failure and what rank 1 did then."""
    records = {
        0: {
            "exit_code": 1,
            "failed_at": 1795755951.314,
            "ended": 1795755951.32,
            "error": GLOO_LOST,
        },
        1: {"exit_code": 0, "ended": 1795755951.301},
    }
    status, why = verdict.decide(evidence(records=records, launcher_exit=1, outcome={}))
    assert status == "failed" and why["failed_rank"] == 0
    assert why["error"] == (
        f"{GLOO_LOST} (at rank 0's failure: rank 1 exited with code 0 0.01 s before)"
    )


def test_a_peer_note_needs_a_lost_connection_and_a_peer_that_ended_then():
    other = {"exit_code": 1, "failed_at": 100.0, "ended": 100.0, "error": "ValueError: bad"}
    status, why = verdict.decide(
        evidence(records={0: other, 1: {"exit_code": 0, "ended": 99.9}}, launcher_exit=1)
    )
    assert why["error"] == "ValueError: bad"
    lost = {**other, "error": GLOO_LOST}
    status, why = verdict.decide(
        evidence(records={0: lost, 1: {"exit_code": 0, "ended": 90.0}}, launcher_exit=1)
    )
    assert why["error"] == GLOO_LOST


def _store_on_a_taken_port() -> tuple[int, str]:
    """A port another socket listens on, and what torch says when a store is made there."""
    import socket
    from datetime import timedelta

    import torch.distributed as dist

    with socket.socket() as taker:
        taker.bind(("127.0.0.1", 0))
        taker.listen()
        port = taker.getsockname()[1]
        try:
            dist.TCPStore("127.0.0.1", port, 1, True, timeout=timedelta(seconds=5))
        except RuntimeError as exc:
            return port, f"torch.distributed.DistNetworkError: {exc}"
    raise AssertionError("torch bound a store on a port another socket listens on")


def test_a_store_port_taken_since_it_was_chosen_is_named_with_what_to_do():
    port, words = _store_on_a_taken_port()
    tail = f"[W ...] torchrun agent\n{words}\nERROR:torch.distributed.elastic...\n"
    status, why = verdict.decide(
        evidence(outcome={"launcher_exit": 1}, launcher_exit=1, records={}, log_tail=tail)
    )
    assert status == "failed"
    assert why["error"] == (
        "the launcher exited with code 1 before any rank recorded its start; see "
        f"logs/launcher.log: port {port} was taken before the run's store could listen there "
        "(another process was listening there); submit the run again, which picks another port"
    )
    # rank 0 of an mpirun run makes the store itself: its traceback says the same
    status, why = verdict.decide(
        evidence(
            outcome={"launcher_exit": 1},
            launcher_exit=1,
            launcher="mpirun",
            records={0: {"exit_code": 1, "ended_at": 5.0, "traceback": words}},
        )
    )
    assert why["failed_rank"] == 0
    assert why["error"].endswith(
        f": port {port} was taken before the run's store could "
        "listen there (another process was listening there); submit "
        "the run again, which picks another port"
    ), why["error"]


def test_a_store_client_answered_by_something_else_is_named():
    tail = (
        "[W1128 12:39:34.690917671 TCPStore.cpp:340] [c10d] TCP client failed to "
        "connect/validate to host 127.0.0.1:35813 - retrying (try=1, timeout=60000ms, "
        "delay=1009ms): Ping failed, invalid value returned from server. Expected: 31220, "
        "Got: 255\n"
    )
    status, why = verdict.decide(
        evidence(outcome={"launcher_exit": 1}, launcher_exit=1, records={}, log_tail=tail)
    )
    assert why["error"].endswith(
        ": port 35813 was taken before the run's store could listen there (something other "
        "than the store answered there); submit the run again, which picks another port"
    )


def test_a_launcher_log_without_a_store_failure_adds_nothing():
    status, why = verdict.decide(
        evidence(outcome={"launcher_exit": 1}, launcher_exit=1, records={}, log_tail="EADDRINUSE\n")
    )
    assert why["error"].endswith("see logs/launcher.log")
