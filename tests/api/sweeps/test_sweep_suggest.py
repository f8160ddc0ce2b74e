"""The values real Optuna trials get from a sweep space: grids and their sizes, each kind of
dimension as suggested (log, rounded, normal), TPE with a SQLite study, and grid search."""

from __future__ import annotations

import itertools
import statistics
import subprocess
import sys

import optuna
import pytest

from jupyter_trainer.api.sweeps.space import (
    MAX_GRID_POINTS,
    grid,
    grid_size,
    parse_dimension,
    parse_space,
    suggest_params,
    values_from_params,
)
from jupyter_trainer.core.errors import SpecError


def study(seed: int = 0, sampler: optuna.samplers.BaseSampler | None = None) -> optuna.Study:
    return optuna.create_study(sampler=sampler or optuna.samplers.RandomSampler(seed=seed))


def test_grid_values_and_size():
    space = parse_space(
        ["h=choice(32, 64)", "q=quniform(0, 1, 0.3)", "n=randint(-1, 2)", "opt=adam"]
    )
    assert grid(space) == {"h": [32, 64], "q": [0.0, 0.3, 0.6, 0.9], "n": [-1, 0, 1]}
    assert space["opt"].grid_values() == ["adam"]
    assert grid_size(space) == 2 * 4 * 3
    assert parse_space(["q=quniform(0.1, 0.5, 0.1)"])["q"].grid_values() == [
        0.1,
        0.2,
        0.3,
        0.4,
        0.5,
    ]


@pytest.mark.parametrize("text", ["uniform(0, 1)", "loguniform(1e-3, 1)", "normal(0, 1)"])
def test_a_grid_over_a_continuous_dimension_is_refused(text):
    space = parse_space([f"lr={text}", "h=choice(1, 2)"])
    for call in (grid, grid_size):
        with pytest.raises(
            SpecError,
            match=r"sweep lr=.*is continuous; write it as choice"
            r".*or pick another sampler",
        ):
            call(space)


def test_a_huge_grid_is_refused():
    with pytest.raises(SpecError, match=rf"more than {MAX_GRID_POINTS}; narrow the range"):
        grid_size(parse_space(["n=randint(0, 10000000)"]))
    with pytest.raises(SpecError, match=r"the grid has 1000000 points, more than"):
        grid(parse_space(["a=randint(0, 1000)", "b=randint(0, 1000)"]))


def test_suggest_gives_each_kind_its_values():
    space = parse_space(
        [
            "c=choice('a', 'b', 3)",
            "u=uniform(-1, 1)",
            "l=loguniform(1e-4, 1e-1)",
            "q=quniform(0, 1, 0.1)",
            "r=randint(1, 4)",
            "opt=adam",
            "layers=[64, 32]",
        ]
    )
    s = study(seed=1)
    seen = []
    for _ in range(300):
        trial = s.ask()
        params = suggest_params(trial, space)
        seen.append(params)
        assert list(params) == list(space)
        assert params["c"] in ("a", "b", 3)
        assert -1 <= params["u"] <= 1 and 1e-4 <= params["l"] <= 1e-1
        assert params["q"] in [round(k / 10, 1) for k in range(11)]  # 0.3, not 0.30000000000000004
        assert params["r"] in (1, 2, 3) and type(params["r"]) is int
        assert params["opt"] == "adam" and params["layers"] == [64, 32]
        assert set(trial.params) == {"c", "u", "l", "q", "r"}  # fixed keys are not suggested
        assert values_from_params(trial.params, space) == params
        s.tell(trial, 0.0)
    assert {p["r"] for p in seen} == {1, 2, 3}  # randint's hi (4) is excluded
    assert {p["q"] for p in seen} == {round(k / 10, 1) for k in range(11)}
    assert {p["c"] for p in seen} == {"a", "b", 3}


def test_quniform_lowers_hi_to_the_last_step():
    dim = parse_dimension("q", "quniform(0, 1, 0.3)")
    values = {dim.suggest(study(seed=i).ask(), "q") for i in range(60)}
    assert values == {0.0, 0.3, 0.6, 0.9}
    assert parse_dimension("q", dim.text) == dim  # the text keeps hi as written


def test_normal_draws_a_quantile_that_optuna_sees():
    dim = parse_dimension("z", "normal(5, 2)")
    s = study(seed=7)
    values = []
    for _ in range(1000):
        trial = s.ask()
        value = dim.suggest(trial, "z")
        assert set(trial.params) == {"z:quantile"}
        assert 1e-6 <= trial.params["z:quantile"] <= 1 - 1e-6
        assert values_from_params(trial.params, {"z": dim}) == {"z": value}
        values.append(value)
        s.tell(trial, 0.0)
    assert abs(statistics.fmean(values) - 5) < 0.25
    assert abs(statistics.stdev(values) - 2) < 0.25
    assert min(values) > 5 - 2 * 4.76 and max(values) < 5 + 2 * 4.76


@pytest.mark.parametrize(
    "text, check",
    [
        ("lognormal(0, 1)", lambda vs: min(vs) > 0 and abs(statistics.median(vs) - 1) < 0.15),
        ("qnormal(10, 2, 0.5)", lambda vs: all((v * 2).is_integer() for v in vs)),
        ("qlognormal(1, 0.5, 0.25)", lambda vs: all((v * 4).is_integer() and v >= 0 for v in vs)),
        (
            "qloguniform(1, 100, 5)",
            lambda vs: all(v % 5 == 0 and 0 <= v <= 100 for v in vs) and len(set(vs)) > 5,
        ),
    ],
)
def test_the_log_and_rounded_forms_draw_what_they_say(text, check):
    """``lognormal`` is ``exp(normal)``; the ``q`` forms round to a multiple of ``q``, written
    in decimal; a finished trial's params give the same values back."""
    dim = parse_dimension("x", text)
    s = study(seed=11)
    values = []
    for _ in range(400):
        trial = s.ask()
        value = dim.suggest(trial, "x")
        assert values_from_params(trial.params, {"x": dim}) == {"x": value}
        values.append(value)
        s.tell(trial, 0.0)
    assert check(values), sorted(values)[:10]
    assert parse_dimension("x", dim.text) == dim


def test_tpe_and_a_sqlite_study_take_every_kind(tmp_path):
    space = parse_space(
        [
            "c=choice(1, 'two', None)",
            "l=loguniform(1e-4, 1e-1)",
            "q=quniform(0, 10, 2.5)",
            "r=randint(0, 3)",
            "z=normal(0, 1)",
            "ln=lognormal(0, 1)",
            "qlu=qloguniform(1, 64, 1)",
            "qn=qnormal(0, 1, 0.5)",
            "qln=qlognormal(0, 1, 0.5)",
            "f=0.5",
        ]
    )
    s = optuna.create_study(
        storage=f"sqlite:///{tmp_path}/study.db",
        sampler=optuna.samplers.TPESampler(seed=0, n_startup_trials=3),
    )
    for _ in range(8):
        trial = s.ask()
        params = suggest_params(trial, space)
        s.tell(trial, params["l"] + params["q"])
    best = values_from_params(s.best_trial.params, space)
    assert set(best) == set(space) and best["f"] == 0.5 and best["q"] in (0.0, 2.5, 5.0, 7.5, 10.0)


def test_grid_search_suggests_every_combination_once():
    space = parse_space(["h=choice(32, 64)", "q=quniform(0, 0.2, 0.1)", "opt=adam"])
    s = study(sampler=optuna.samplers.GridSampler(grid(space), seed=3))
    seen = []
    for _ in range(grid_size(space)):
        trial = s.ask()
        params = suggest_params(trial, space)
        seen.append((params["h"], params["q"], params["opt"]))
        try:
            s.tell(trial, 0.0)
        except RuntimeError:  # GridSampler calls study.stop() when its grid is done
            pass
    assert sorted(seen) == sorted(itertools.product([32, 64], [0.0, 0.1, 0.2], ["adam"]))


def test_parsing_does_not_import_optuna():
    code = (
        "import sys\nfrom jupyter_trainer.api.sweeps import policies, space\n"
        "space.parse_space(['lr=loguniform(1e-4, 1e-1)'])\npolicies.parse_prune('bandit:0.1')\n"
        "policies.check_sampler('tpe', {})\nassert 'optuna' not in sys.modules, 'optuna'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
