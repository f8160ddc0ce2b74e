"""Samplers and pruners for sweeps, checked against real Optuna studies driven the way the
sweep driver drives them: ``study.ask()``, ``trial.report``, ``trial.should_prune()``,
``study.tell``."""

from __future__ import annotations

import math
import sys

import optuna
import pytest
from optuna.trial import TrialState

from jupyter_trainer.api.sweeps.policies import (
    SAMPLERS,
    BanditPruner,
    PrunePolicy,
    check_sampler,
    make_pruner,
    make_sampler,
    parse_prune,
)
from jupyter_trainer.api.sweeps.space import parse_space
from jupyter_trainer.core.errors import SpecError

NAN = math.nan


@pytest.mark.parametrize(
    "text, kind, value, slack",
    [
        ("none", "none", None, "factor"),
        (None, "none", None, "factor"),
        ("median", "median", 2, "factor"),
        ("median:0", "median", 0, "factor"),
        ("median:5", "median", 5, "factor"),
        (" truncation: 25 ", "truncation", 25.0, "factor"),
        ("truncation:12.5", "truncation", 12.5, "factor"),
        ("bandit:0.1", "bandit", 0.1, "factor"),
        ("bandit:amount=0.2", "bandit", 0.2, "amount"),
        ("bandit:amount = 2", "bandit", 2.0, "amount"),
        ("hyperband", "hyperband", None, "factor"),
    ],
)
def test_prune_texts(text, kind, value, slack):
    policy = parse_prune(text)
    assert (policy.kind, policy.value, policy.slack) == (kind, value, slack)
    assert parse_prune(policy.text) == policy
    assert parse_prune(policy) is policy


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("mediam", "is not a prune policy; use one of none, median, median:N"),
        ("median:x", "is not a prune policy"),
        ("median:1.5", "is not a prune policy"),
        ("median:-1", "median:N takes a whole number of trials N >= 0"),
        ("median:", "is not a prune policy"),
        ("truncation", "truncation needs a number, for example truncation:25"),
        ("truncation:0", "between 0 and 100"),
        ("truncation:100", "between 0 and 100"),
        ("truncation:nan", "truncation needs a number"),
        ("bandit", "bandit needs a number, for example bandit:0.1"),
        ("bandit:0", "slack factor must be above 0"),
        ("bandit:amount=-1", "slack amount must be above 0"),
        ("bandit:amount", "is not a prune policy"),
        ("bandit:amounts=1", "is not a prune policy"),
        ("hyperband:3", "takes no value; write hyperband"),
        ("none:1", "takes no value; write none"),
        ("", "is not a prune policy"),
    ],
)
def test_bad_prune_texts_name_the_text_and_the_forms(text, fragment):
    with pytest.raises(SpecError) as caught:
        parse_prune(text)
    assert str(caught.value).startswith(f"--prune {text!r}")
    assert fragment in str(caught.value)


def test_prune_policy_objects_validate_themselves():
    with pytest.raises(SpecError, match="unknown prune policy 'asha'"):
        PrunePolicy("asha")
    with pytest.raises(SpecError, match="bandit's slack is a factor or an amount"):
        PrunePolicy("median", 2, slack="amount")
    with pytest.raises(SpecError, match="--prune takes a policy text, got 3"):
        parse_prune(3)


def test_samplers():
    space = parse_space(["lr=loguniform(1e-4, 1e-1)", "h=choice(32, 64)", "opt=adam"])
    grid_space = parse_space(["h=choice(32, 64)", "n=randint(0, 3)", "opt=adam"])
    assert isinstance(make_sampler("random", space, seed=1), optuna.samplers.RandomSampler)
    assert isinstance(make_sampler("tpe", space), optuna.samplers.TPESampler)
    assert isinstance(make_sampler("gp", space, seed=0), optuna.samplers.GPSampler)
    assert isinstance(make_sampler("grid", grid_space), optuna.samplers.GridSampler)
    with pytest.raises(
        SpecError,
        match=r"unknown sampler 'cmaes'; use one of random, grid, tpe, "
        r"gp",
    ):
        check_sampler("cmaes", space)
    with pytest.raises(
        SpecError,
        match=r"sweep lr=loguniform\(0.0001, 0.1\): a grid needs a "
        r"finite list.*pick another sampler",
    ):
        check_sampler("grid", space)
    with pytest.raises(SpecError, match="a grid needs"):
        make_sampler("grid", space)
    for name in SAMPLERS:
        check_sampler(name, grid_space)


def test_gp_without_torch_says_how_to_get_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` now fails
    with pytest.raises(
        SpecError,
        match=r"--sampler gp needs torch and scipy .*pip install torch "
        r"scipy`, or use --sampler tpe",
    ):
        make_sampler("gp", parse_space(["lr=uniform(0, 1)"]))


def test_each_sampler_runs_a_study():
    space = parse_space(["x=uniform(-1, 1)", "n=randint(0, 3)", "c=choice('a', 'b')"])
    grid_space = parse_space(["n=randint(0, 3)", "c=choice('a', 'b')"])
    for name in SAMPLERS:
        s = optuna.create_study(
            sampler=make_sampler(name, grid_space if name == "grid" else space, seed=0)
        )
        for _ in range(4):
            trial = s.ask()
            x = trial.suggest_float("x", -1, 1) if name != "grid" else 0.0
            trial.suggest_int("n", 0, 2)
            trial.suggest_categorical("c", ["a", "b"])
            s.tell(trial, x * x)
        assert len(s.trials) == 4


def test_pruners_built_for_each_policy():
    pruners = optuna.pruners
    assert isinstance(make_pruner("none"), pruners.NopPruner)
    assert isinstance(make_pruner(None), pruners.NopPruner)
    assert isinstance(make_pruner("median:3", after=2, every=5), pruners.MedianPruner)
    assert type(make_pruner("truncation:25")) is pruners.PercentilePruner
    bandit = make_pruner("bandit:amount=0.2", after=4, every=3)
    assert isinstance(bandit, BanditPruner) and isinstance(bandit, pruners.BasePruner)
    assert (bandit.slack_factor, bandit.slack_amount, bandit.after, bandit.every) == (
        None,
        0.2,
        4,
        3,
    )
    assert make_pruner(PrunePolicy("bandit", 0.1)).slack_factor == 0.1
    hyperband = make_pruner("hyperband", after=5)
    assert isinstance(hyperband, pruners.HyperbandPruner)
    assert hyperband._min_resource == 5 and make_pruner("hyperband")._min_resource == 1
    with pytest.raises(
        SpecError, match="the prune every setting takes a whole number of steps >= 1, got 0"
    ):
        make_pruner("median", every=0)
    with pytest.raises(SpecError, match="the prune after setting .* got -1"):
        make_pruner("median", after=-1)


def run_table(
    direction: str, pruner: optuna.pruners.BasePruner, rows: list[tuple], storage: str | None = None
) -> list[bool]:
    """Play ``rows`` on a study: ``(trial, step, value)`` reports and asks should_prune (a
    pruned trial is told PRUNED); ``(trial, "done")`` tells the trial COMPLETE. A trial
    starts at its first row. Returns should_prune's answer for every report row."""
    study = optuna.create_study(direction=direction, pruner=pruner, storage=storage)
    trials: dict[str, optuna.Trial] = {}
    last: dict[str, float] = {}
    answers = []
    for row in rows:
        name = row[0]
        trial = trials.get(name) or trials.setdefault(name, study.ask())
        if row[1] == "done":
            study.tell(trial, last[name])
            continue
        _, step, last[name] = row
        trial.report(last[name], step)
        answers.append(trial.should_prune())
        if answers[-1]:
            study.tell(trial, state=TrialState.PRUNED)
    return answers


# Each row: (trial, step, value, pruned?), worked out by hand from HyperDrive's rule. The
# comment gives the best value other trials reported at that step and the bar it sets.
MAXIMIZE_FACTOR_0_1 = [  # prune when value < best / 1.1
    ("a", 0, 0.50, False),  # no other value at step 0
    ("b", 0, 0.46, False),  # best 0.50, bar 0.4545
    ("c", 0, 0.90, False),  # best 0.50
    ("c", 1, 0.10, False),  # no other value at step 1
    ("a", 1, 0.60, False),  # best 0.10 (c), bar 0.0909
    ("c", 2, 0.05, False),  # no other value at step 2
    ("b", 1, 0.54, True),  # best 0.60 (a), bar 0.5454
    ("a", 2, 0.70, False),  # best 0.05 (c)
    ("a", "done"),
    ("c", 3, 0.01, False),  # no other value at step 3
    ("c", "done"),
    ("d", 0, 0.80, True),  # best 0.90 (c, complete), bar 0.8181
    ("e", 0, 0.83, False),  # best 0.90, bar 0.8181
    ("e", 1, 0.54, True),  # best 0.60 (a), bar 0.5454
    ("f", 0, 0.95, False),  # best 0.90 (c)
    ("f", 1, 0.05, True),  # best 0.60 (a), bar 0.5454
    ("g", 0, 0.86, True),  # best 0.95 (f, pruned: it counts), bar 0.8636
]

MINIMIZE_AMOUNT_0_2_AFTER_1_EVERY_2 = [  # prune when value > best + 0.2, at steps 1, 3, 5 ...
    ("a", 0, 1.00, False),  # step 0 is before `after`
    ("a", 1, 1.00, False),  # no other value at step 1
    ("b", 0, 5.00, False),  # step 0 is before `after`, however bad
    ("b", 1, 1.15, False),  # best 1.00, bar 1.20
    ("b", 2, 9.00, False),  # step 2 is not an evaluation step
    ("a", 2, 0.50, False),  # not an evaluation step
    ("a", 3, 0.60, False),  # no other value at step 3
    ("b", 3, 0.85, True),  # best 0.60, bar 0.80
    ("c", 1, 1.20, False),  # best 1.00 (a), bar 1.20: equal is kept
    ("c", 2, 2.00, False),  # not an evaluation step
    ("c", 3, NAN, True),  # not finite: always pruned
    ("d", 1, 1.21, True),  # best 1.00, bar 1.20
]

MINIMIZE_FACTOR_0_1 = [  # prune when value > best * 1.1
    ("a", 0, 2.00, False),  # no other value
    ("b", 0, 2.30, True),  # best 2.00, bar 2.20
    ("c", 0, 2.10, False),  # best 2.00 (b's 2.30 pruned, still counted but not best)
    ("c", 1, NAN, True),  # not finite
    ("d", 0, 2.19, False),  # best 2.00, bar 2.20
    ("d", 1, 1.00, False),  # c's NaN at step 1 is no reference: nothing to compare
    ("a", 1, 1.12, True),  # best 1.00 (d), bar 1.10
]

MAXIMIZE_AMOUNT_0_2 = [  # prune when value < best - 0.2
    ("a", 0, 0.90, False),  # no other value
    ("b", 0, 0.75, False),  # best 0.90, bar 0.70
    ("b", 1, 0.30, False),  # no other value at step 1
    ("a", 1, 0.60, False),  # best 0.30, bar 0.10
    ("c", 0, 0.65, True),  # best 0.90, bar 0.70
    ("d", 0, 0.80, False),  # best 0.90, bar 0.70
    ("d", 1, 0.35, True),  # best 0.60 (a), bar 0.40
    ("e", 0, -math.inf, True),  # not finite
]


@pytest.mark.parametrize("storage", [None, "sqlite"])
@pytest.mark.parametrize(
    "direction, policy, after, every, table",
    [
        ("maximize", "bandit:0.1", 0, 1, MAXIMIZE_FACTOR_0_1),
        ("minimize", "bandit:amount=0.2", 1, 2, MINIMIZE_AMOUNT_0_2_AFTER_1_EVERY_2),
        ("minimize", "bandit:0.1", 0, 1, MINIMIZE_FACTOR_0_1),
        ("maximize", "bandit:amount=0.2", 0, 1, MAXIMIZE_AMOUNT_0_2),
    ],
)
def test_bandit_prunes_as_the_hand_worked_table_says(
    direction, policy, after, every, table, storage, tmp_path
):
    url = f"sqlite:///{tmp_path}/study.db" if storage else None
    answers = run_table(
        direction,
        make_pruner(policy, after=after, every=every),
        [row[:3] for row in table],
        storage=url,
    )
    expected = [row[3] for row in table if row[1] != "done"]
    reports = [row for row in table if row[1] != "done"]
    assert [(r[0], r[1], a) for r, a in zip(reports, answers)] == [
        (r[0], r[1], e) for r, e in zip(reports, expected)
    ]


def finished(study: optuna.Study, curves: list[list[float]]) -> None:
    for curve in curves:
        trial = study.ask()
        for step, value in enumerate(curve):
            trial.report(value, step)
        study.tell(trial, curve[-1])


def pruned_at(study: optuna.Study, curve: list[float]) -> int | None:
    """Report ``curve`` step by step; the step at which the trial was pruned, else None."""
    trial = study.ask()
    for step, value in enumerate(curve):
        trial.report(value, step)
        if trial.should_prune():
            study.tell(trial, state=TrialState.PRUNED)
            return step
    study.tell(trial, curve[-1])
    return None


def test_median_prunes_a_clearly_bad_trial_after_its_startup_trials():
    study = optuna.create_study(direction="minimize", pruner=make_pruner("median"))
    finished(study, [[1.0, 0.8, 0.6, 0.5]])
    assert pruned_at(study, [9.0, 9.0, 9.0, 9.0]) is None  # one finished trial: still startup
    study = optuna.create_study(direction="minimize", pruner=make_pruner("median"))
    finished(study, [[1.0, 0.8, 0.6, 0.5], [1.2, 0.9, 0.7, 0.6]])
    assert pruned_at(study, [9.0, 9.0, 9.0, 9.0]) == 0
    assert pruned_at(study, [0.9, 0.7, 0.5, 0.4]) is None
    study = optuna.create_study(direction="maximize", pruner=make_pruner("median:3"))
    finished(study, [[0.5, 0.6], [0.6, 0.7]])
    assert pruned_at(study, [0.1, 0.1]) is None  # two finished of the three it waits for
    finished(study, [[0.55, 0.65]])
    assert pruned_at(study, [0.1, 0.1]) == 0


def test_median_honours_after_and_every():
    study = optuna.create_study(
        direction="minimize", pruner=make_pruner("median", after=3, every=2)
    )
    finished(study, [[1.0] * 8, [1.1] * 8])
    assert pruned_at(study, [5.0] * 8) == 3  # not before step 3
    assert pruned_at(study, [0.5] * 4 + [5.0] * 4) is None  # its best (0.5) stays below 1.05
    study = optuna.create_study(
        direction="minimize", pruner=make_pruner("median", after=3, every=2)
    )
    finished(study, [[1.0] * 8, [1.1] * 8])
    assert pruned_at(study, [5.0] * 3 + [0.5] + [5.0] * 4) is None
    study = optuna.create_study(
        direction="maximize", pruner=make_pruner("median", after=1, every=3)
    )
    finished(study, [[1.0, 1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0, 1.0]])
    trial = study.ask()
    decisions = []
    for step in range(5):
        trial.report(0.0, step)
        decisions.append(trial.should_prune())
    assert decisions == [False, True, False, False, True]  # judged at steps 1 and 4 only


@pytest.mark.parametrize(
    "direction, value, pruned",
    [
        # Finished trials reported 1, 2, 3 and 4 at step 0; truncation:25 stops the worst 25%.
        ("minimize", 3.5, True),  # above the 75th percentile (3.25): among the worst
        ("minimize", 3.0, False),
        ("maximize", 1.5, True),  # below the 25th percentile (1.75): among the worst
        ("maximize", 2.0, False),
    ],
)
def test_truncation_stops_the_worst_percent_in_both_directions(direction, value, pruned):
    study = optuna.create_study(direction=direction, pruner=make_pruner("truncation:25"))
    finished(study, [[1.0], [2.0], [3.0], [4.0]])
    assert (pruned_at(study, [value]) == 0) is pruned


def test_truncation_waits_for_two_finished_trials_and_honours_after():
    study = optuna.create_study(direction="maximize", pruner=make_pruner("truncation:50", after=2))
    finished(study, [[0.9, 0.9, 0.9, 0.9]])
    assert pruned_at(study, [0.0, 0.0, 0.0, 0.0]) is None
    finished(study, [[0.8, 0.8, 0.8, 0.8]])
    assert pruned_at(study, [0.0, 0.0, 0.0, 0.0]) == 2


def test_a_pruner_in_a_study_loaded_from_sqlite(tmp_path):
    url = f"sqlite:///{tmp_path}/study.db"
    optuna.create_study(study_name="s", storage=url, direction="maximize")
    study = optuna.load_study(study_name="s", storage=url, pruner=make_pruner("bandit:0.1"))
    finished(study, [[1.0, 1.0]])
    assert pruned_at(study, [0.95, 0.5]) == 1
