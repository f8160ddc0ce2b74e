"""Sweeps end to end: a real driver, real Optuna storage, and trials that are real runs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from conftest import leftover, wait_for
from support.jt_cli import CLI
from support.workloads import PEAK

import jupyter_trainer as jt
from jupyter_trainer.api import runs as api
from jupyter_trainer.core.errors import SpecError, TrainerError
from jupyter_trainer.rankside.host import procs

# A known optimum at x=0.3, y=0.7 (objective 0 there, negative elsewhere).
# Flat scores: a trial scores 1.0 everywhere in the good region (x > 0.3), -1.0 elsewhere.
REGIONS = """
import time
from jupyter_trainer import runtime as jt
score = 1.0 if jt.params["x"] > 0.3 else -1.0
for step in range(8):
    jt.log(step=step, score=score)
    time.sleep(0.15)
"""
SLOW = """
import time
from jupyter_trainer import runtime as jt
for step in range(int(jt.params.get("steps", 12))):
    jt.log(step=step, score=jt.params["x"] * (step + 1))
    time.sleep(0.25)
"""


def script(tmp_path: Path, text: str, name: str = "train.py") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def overlap(runs: list[api.Run]) -> int:
    """The most trials running at one moment, from each run's own start and end times."""
    edges = []
    for run in runs:
        state = run.state
        edges += [(state["created"], 1), (state["ended"], -1)]
    running = most = 0
    for _, change in sorted(edges, key=lambda e: (e[0], e[1])):
        running += change
        most = max(most, running)
    return most


def driver_pid(sweep: jt.Sweep) -> int:
    return sweep.sweeps.read_state(sweep.id).get("driver", {}).get("pid")


@pytest.mark.parametrize("sampler", ["random", "tpe", "gp"])
def test_a_sweep_finds_a_known_optimum_without_exceeding_parallel(home, tmp_path, sampler):
    sweep = jt.sweep(
        script=script(tmp_path, PEAK),
        space={"x": "uniform(0, 1)", "y": "uniform(0, 1)"},
        metric="score",
        goal="max",
        trials=24,
        parallel=3,
        sampler=sampler,
        seed=7,
        launcher="python",
    )
    sweep.wait(timeout=240)
    state = sweep.state
    assert state["status"] == "completed" and len(state["trials"]) == 24
    assert all(t["status"] == "completed" for t in state["trials"])
    best = sweep.best()
    assert best.spec.sweep == sweep.id and best.spec.params["x"] == state["best"]["params"]["x"]
    x, y = best.spec.params["x"], best.spec.params["y"]
    assert abs(x - 0.3) < 0.2 and abs(y - 0.7) < 0.2, (x, y)
    assert state["best"]["objective"] == max(t["objective"] for t in state["trials"]) > -0.04
    trials = sweep.trials()
    assert [r.spec.trial for r in trials] == list(range(24))
    assert overlap(trials) <= 3
    # The study is Optuna's own, in the store: it agrees with the sweep's record.
    import optuna

    study = optuna.load_study(study_name=sweep.id, storage=sweep.storage)
    assert study.best_value == pytest.approx(state["best"]["objective"])
    assert study.best_trial.number == state["best"]["number"]


def test_parallel_trials_do_overlap(home, tmp_path):
    sweep = jt.sweep(
        script=script(tmp_path, SLOW),
        space={"x": "choice(1, 2, 3, 4)", "steps": 4},
        metric="score",
        trials=4,
        parallel=2,
        sampler="grid",
        launcher="python",
    )
    sweep.wait(timeout=120)
    assert overlap(sweep.trials()) == 2
    assert sorted(r.spec.params["x"] for r in sweep.trials()) == [1, 2, 3, 4]
    assert all(r.spec.params["steps"] == 4 for r in sweep.trials())
    # the next trial's snapshot is copied ahead while the driver waits; none is left over
    assert not any((home / "staging").iterdir())


def test_hostile_choices_reach_the_trial_unchanged(home, tmp_path):
    canary = tmp_path / "canary"
    hostile = ["; touch {0} #", "$(touch {0})", "`touch {0}`", "a'b\"c\\n", "--help"]
    hostile = [h.format(canary) for h in hostile]
    code = "from jupyter_trainer import runtime as jt\njt.log(step=0, score=1.0, word=word)\n"
    sweep = jt.sweep(
        code,
        space={"word": "choice(" + ", ".join(map(repr, hostile)) + ")"},
        metric="score",
        trials=len(hostile),
        parallel=2,
        sampler="grid",
        launcher="python",
        namespace={"word": "x"},
    )
    sweep.wait(timeout=120)
    got = []
    for run in sweep.trials():
        assert run.status == "completed"
        events = [e for e in run.store.iter_events(run.id, 0) if e.get("kind") == "metric"]
        got.append(events[0]["values"]["word"])
        assert run.spec.params["word"] == got[-1]
    assert sorted(got) == sorted(hostile)
    assert not canary.exists()


def test_the_median_policy_prunes_the_bad_region_at_its_first_step(home, tmp_path):
    sweep = jt.sweep(
        script=script(tmp_path, REGIONS),
        space={"x": "uniform(0, 1)"},
        metric="score",
        trials=10,
        parallel=1,
        sampler="random",
        seed=3,
        prune="median:2",
        prune_after=2,
        launcher="python",
    )
    sweep.wait(timeout=240)
    trials = sweep.state["trials"]
    # Worked by hand from the order the trials ran in (one at a time): a trial is pruned
    # at step 2 when it is bad and, of the trials completed before it (at least 2), more
    # than half were good, so that the median of their scores is above -1.
    expected, completed = {}, []
    for t in trials:
        good = t["params"]["x"] > 0.3
        prune = not good and len(completed) >= 2 and sum(completed) * 2 > len(completed)
        expected[t["number"]] = "pruned" if prune else "completed"
        if not prune:
            completed.append(good)
    assert {t["number"]: t["status"] for t in trials} == expected
    pruned = [t for t in trials if t["status"] == "pruned"]
    assert pruned, "the seed gave no bad trial after two completed good ones"
    for t in pruned:
        assert t["params"]["x"] <= 0.3 and t["pruned_at"] == 2
        assert "median" in t["reason"] and "step 2" in t["reason"]
        run = api.get_run(t["run"])
        assert run.status == "canceled" and "pruned" in run.state["reason"]
        assert leftover(run.id) == []
    import optuna

    study = optuna.load_study(study_name=sweep.id, storage=sweep.storage)
    assert {t.number for t in study.trials if t.state == optuna.trial.TrialState.PRUNED} == {
        t["number"] for t in pruned
    }


def test_a_killed_driver_resumes_with_the_finished_trials_kept(home, tmp_path):
    sweep = jt.sweep(
        script=script(tmp_path, SLOW),
        space={"x": "uniform(-1, 1)", "steps": 8},
        metric="score",
        trials=5,
        parallel=2,
        sampler="random",
        seed=1,
        launcher="python",
    )
    wait_for(
        lambda: sweep.state.get("counts", {}).get("completed", 0) >= 2,
        120,
        what="two finished trials",
    )
    before = {t["number"]: t for t in sweep.state["trials"] if t["status"] == "completed"}
    pid = driver_pid(sweep)
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: sweep.status == "interrupted", 20, what="the sweep to be interrupted")
    with pytest.raises(TrainerError, match="sweep resume"):
        sweep.wait(timeout=5)
    time.sleep(1.0)  # trials go on without their driver
    sweep.resume()
    assert driver_pid(sweep) != pid
    sweep.wait(timeout=240)
    state = sweep.state
    assert state["status"] == "completed"
    counted = [t for t in state["trials"] if t.get("run")]
    assert len(counted) == 5 and sorted(t["number"] for t in counted) == sorted(
        {t["number"] for t in counted}
    )
    for number, trial in before.items():
        kept = next(t for t in state["trials"] if t["number"] == number)
        assert (kept["run"], kept["objective"], kept["status"]) == (
            trial["run"],
            trial["objective"],
            "completed",
        )
    assert all(t["status"] == "completed" for t in counted)
    assert state["best"]["objective"] == max(t["objective"] for t in counted)


def test_cancel_ends_every_trial_and_the_driver(home, tmp_path):
    sweep = jt.sweep(
        script=script(tmp_path, SLOW),
        space={"x": "uniform(-1, 1)", "steps": 200},
        metric="score",
        trials=6,
        parallel=2,
        sampler="random",
        procs=2,
    )
    wait_for(
        lambda: sweep.state.get("counts", {}).get("running", 0) == 2, 120, what="two trials running"
    )
    runs = sweep.trials()
    wait_for(lambda: all(r.status == "running" for r in runs), 60, what="their ranks")
    pid = driver_pid(sweep)
    sweep.cancel()
    assert sweep.status == "canceled"
    assert [t["status"] for t in sweep.state["trials"]] == ["canceled", "canceled"]
    for run in runs:
        assert run.status == "canceled"
        assert leftover(run.id) == []
    wait_for(lambda: not procs.is_alive(pid), 10, what="the driver to exit")
    with pytest.raises(TrainerError, match="already ended"):
        sweep.cancel()


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"space": {"lr": "loguniform(0, 1)"}}, "lr"),
        ({"space": {"lr": "__import__('os').system('touch /tmp/jt-pwned')"}}, "lr"),
        ({"space": ["lr"]}, "KEY=EXPR"),
        ({"space": {"lr": "uniform(0, 1)"}, "trials": 0}, "--trials"),
        ({"space": {"lr": "uniform(0, 1)"}, "sampler": "bayes"}, "bayes"),
        ({"space": {"lr": "uniform(0, 1)"}, "sampler": "grid"}, "grid"),
        ({"space": {"lr": "uniform(0, 1)"}, "prune": "bandit"}, "bandit"),
        ({"space": {"lr": "uniform(0, 1)"}, "goal": "up"}, "--goal"),
        ({"space": {"lr": "uniform(0, 1)"}, "metric": None}, "--metric"),
        ({"space": {}}, "search space"),
        ({"space": {"lr": "uniform(0, 1)"}, "target": "nowhere"}, "nowhere"),
        ({"space": {"lr": "uniform(0, 1)"}, "procs": 0}, "procs"),
        (
            {"space": {"lr": "uniform(0, 1)"}, "seed": -1},
            r"--seed -1 is not valid: give a whole "
            r"number from 0 to 4294967295",
        ),
        ({"space": {"lr": "uniform(0, 1)"}, "seed": 2**32}, "--seed 4294967296 is not valid"),
        (
            {"space": {"lr": "uniform(0, 1)"}, "trials": 4, "parallel": 5},
            "--parallel 5 is more than --trials 4: give --parallel 4 or less",
        ),
        (
            {"space": {"lr": "uniform(0, 1)"}, "trials": 1000, "parallel": 101},
            "--parallel 101 is more than 100 trials at once: give --parallel 100 or less",
        ),
    ],
)
def test_bad_input_names_the_problem_and_starts_nothing(home, tmp_path, kwargs, message):
    options = {"metric": "score", "launcher": "python", **kwargs}
    with pytest.raises((SpecError, TrainerError), match=message):
        jt.sweep(script=script(tmp_path, PEAK), **options)
    assert not (home / "sweeps").exists() or not any((home / "sweeps").iterdir())
    assert api.runs() == []
    assert not Path("/tmp/jt-pwned").exists()


def test_a_cell_must_read_the_swept_names(home):
    with pytest.raises(SpecError, match="does not read 'hidden'"):
        jt.sweep(
            "print(lr)",
            space={"lr": "uniform(0, 1)", "hidden": "choice(1, 2)"},
            metric="score",
            namespace={"lr": 0.1},
        )
    assert jt.sweeps() == []


def test_cli_sweep_show_json_and_list(home, tmp_path):
    space_file = tmp_path / "space.yaml"
    space_file.write_text("x: choice(0.1, 0.3, 0.5)\ny: uniform(0.6, 0.8)\n")
    done = subprocess.run(
        [
            *CLI,
            "sweep",
            str(script(tmp_path, PEAK)),
            "--launcher",
            "python",
            "--sweep-file",
            str(space_file),
            "--sweep",
            "x=choice(0.3, 0.9)",
            "--trials",
            "3",
            "--parallel",
            "2",
            "--metric",
            "score",
            "--wait",
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr
    sweep_id = done.stdout.strip()
    assert f"sweep {sweep_id}: completed, 3 of 3 trials" in done.stderr
    shown = json.loads(
        subprocess.run(
            [*CLI, "sweep", "show", sweep_id, "--json"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    assert shown["status"] == "completed" and len(shown["trials"]) == 3
    assert shown["spec"]["space"]["x"] == "choice(0.3, 0.9)"
    for trial in shown["trials"]:
        assert trial["status"] == "completed" and trial["params"]["x"] in (0.3, 0.9)
        run = api.get_run(trial["run"])
        events = [e for e in run.store.iter_events(run.id, 0) if e.get("kind") == "metric"]
        assert trial["objective"] == events[-1]["values"]["score"]
    listed = subprocess.run([*CLI, "sweeps"], capture_output=True, text=True, check=True).stdout
    assert sweep_id in listed and "completed" in listed and "3/3" in listed
    bad = subprocess.run([*CLI, "sweep", "show", "../etc"], capture_output=True, text=True)
    assert bad.returncode == 2 and "invalid" in bad.stderr
    lone = subprocess.run(
        [*CLI, "submit", str(tmp_path / "train.py"), "--trials", "3"],
        capture_output=True,
        text=True,
    )
    assert lone.returncode == 2 and "unrecognized" in lone.stderr
    assert len(api.runs()) == 3


def test_a_magic_line_keeps_the_quotes_of_sweep_expressions():
    from jupyter_trainer.frontends.commands.options import cell_parser, split_line
    from jupyter_trainer.frontends.commands.sweep_options import is_sweep, sweep_kwargs

    words, rest = split_line(
        "--procs 2 --sweep word=choice('a b','c;d') --sweep 'lr=uniform(0,1)' "
        "--name 'my run' -p note=\"x y\" --trials 3 --metric acc -- extra"
    )
    opts = cell_parser().parse_args(words)
    assert is_sweep(opts) and rest == ["extra"]
    assert opts.sweep == ["word=choice('a b','c;d')", "lr=uniform(0,1)"]
    assert opts.name == "my run" and opts.param == ["note=x y"]
    assert sweep_kwargs(opts)["trials"] == 3
    with pytest.raises(SpecError, match="--trials, --metric only go with a sweep"):
        is_sweep(cell_parser().parse_args(split_line("--trials 3 --metric acc")[0]))
    with pytest.raises(SpecError, match="check the quotes"):
        split_line("--sweep word=choice('a b)")


def test_timeout_starts_no_trial_after_it_and_lets_running_ones_finish(home, tmp_path):
    sweep = jt.sweep(
        script=script(tmp_path, SLOW),
        space={"x": "uniform(0, 1)", "steps": 6},
        metric="score",
        trials=20,
        parallel=1,
        sampler="random",
        timeout=2.5,
        objective="best",
        launcher="python",
    )
    sweep.wait(timeout=120)
    state = sweep.state
    assert state["status"] == "completed" and "--timeout 2.5 s reached" in state["reason"]
    assert 1 <= len(state["trials"]) < 20
    assert all(t["status"] == "completed" for t in state["trials"])
    last_start = max(jt.get_run(t["run"]).state["created"] for t in state["trials"])
    assert last_start < state["started"] + 2.5 + 1.0
    for trial in state["trials"]:  # --objective best: the best value logged, here the last
        assert trial["objective"] == pytest.approx(trial["params"]["x"] * 6)


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--seed", "-1"], "--seed -1 is not valid: give a whole number from 0 to 4294967295"),
        (["--trials", "3", "--parallel", "4"], "--parallel 4 is more than --trials 3"),
        (["--trials", "5000", "--parallel", "5000"], "--parallel 5000 is more than 100 trials"),
    ],
)
def test_cli_refuses_a_bad_seed_or_parallel_in_one_line_and_starts_nothing(
    home, tmp_path, flags, message
):
    done = subprocess.run(
        [
            *CLI,
            "sweep",
            str(script(tmp_path, PEAK)),
            "--launcher",
            "python",
            "--sweep",
            "x=uniform(0, 1)",
            "--sweep",
            "y=uniform(0, 1)",
            "--metric",
            "score",
            *flags,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("jupyter-trainer: error: ")
    assert message in lines[0]
    assert not (home / "sweeps").exists() or not any((home / "sweeps").iterdir())
    assert api.runs() == []


def test_sweep_show_escapes_swept_values_that_are_not_printable(home, tmp_path):
    """A swept string with a newline or an ANSI escape shows on its own row, escaped as
    repr writes it, in the table and in the summary line's best params."""
    code = "from jupyter_trainer import runtime as jt\njt.log(step=0, score=len(word))\n"
    sweep = jt.sweep(
        code,
        space={"word": "choice('a\\nb', '\\x1b[2Jclear')"},
        metric="score",
        trials=2,
        parallel=1,
        sampler="grid",
        launcher="python",
        namespace={"word": "x"},
    )
    sweep.wait(timeout=120)
    assert sorted(r.spec.params["word"] for r in sweep.trials()) == ["\x1b[2Jclear", "a\nb"]
    shown = subprocess.run(
        [*CLI, "sweep", "show", sweep.id],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    lines = shown.stdout.splitlines()
    assert len(lines) == 4, lines  # the summary, the header and one row per trial
    assert "\x1b" not in shown.stdout
    assert any("a\\nb" in line for line in lines[2:])
    assert any("\\x1b[2Jclear" in line for line in lines[2:])
    assert "word=\\x1b[2Jclear" in lines[0]  # the best trial: the longer string
