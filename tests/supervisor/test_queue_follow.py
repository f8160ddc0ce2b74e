"""A run the scheduler admitted and finished between two of the supervisor's looks at its
queue still records that it ran (supervisor/queue_follow.py)."""

from __future__ import annotations

from jupyter_trainer.supervisor.queue_follow import QueueFollowing


class Followed(QueueFollowing):
    """The supervisor's state and its ``transition``, at a fixed clock of 2000.0."""

    def __init__(self, state):
        self.state = state

    def transition(self, status, fields=None):
        self.state["stages"][self.state["status"]]["end"] = 2000.0
        self.state["stages"][status] = {"start": 2000.0}
        self.state["status"] = status


def test_a_job_that_ran_between_two_looks_at_its_queue_has_a_running_stage():
    run = Followed({"status": "queued", "stages": {"queued": {"start": 1000.0}}})
    run._ran_unseen({0: {"started": 1500.0}, 1: {"started": 1499.5}})
    assert run.state["status"] == "running"
    assert run.state["stages"] == {
        "queued": {"start": 1000.0, "end": 1499.5},
        "running": {"start": 1499.5},
    }


def test_a_job_whose_ranks_never_started_stays_queued():
    run = Followed({"status": "queued", "stages": {"queued": {"start": 1000.0}}})
    run._ran_unseen({})
    assert run.state["status"] == "queued" and "running" not in run.state["stages"]
    running = Followed({"status": "running", "stages": {"running": {"start": 1000.0}}})
    running._ran_unseen({0: {"started": 999.0}})
    assert running.state["stages"] == {"running": {"start": 1000.0}}


def test_ranks_whose_records_came_after_the_end_still_give_a_running_stage():
    """On Kubernetes the ranks' records come through the pods' logs, after the supervisor saw
    the job end: the run went from ``queued`` to ``finalizing``, and it still ran."""
    run = Followed(
        {
            "status": "finalizing",
            "stages": {"queued": {"start": 1000.0, "end": 2000.0}, "finalizing": {"start": 2000.0}},
        }
    )
    run._ran_unseen({0: {"started": 1500.0}})
    assert run.state["status"] == "finalizing"
    assert list(run.state["stages"].items()) == [
        ("queued", {"start": 1000.0, "end": 1500.0}),
        ("running", {"start": 1500.0, "end": 2000.0}),
        ("finalizing", {"start": 2000.0}),
    ]
    ended = Followed({"status": "completed", "stages": {"queued": {"start": 1000.0, "end": 2.0}}})
    ended._ran_unseen({0: {"started": 1500.0}})
    assert "running" not in ended.state["stages"]
