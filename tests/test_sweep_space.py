"""The sweep search space: expressions read as data, canonical texts, YAML files, grids,
and the values real Optuna trials get for each kind of dimension."""

from __future__ import annotations

import itertools
import resource
import statistics
import subprocess
import sys
import time

import optuna
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from jupyter_trainer.api.sweeps.space import (
    MAX_GRID_POINTS,
    Dimension,
    grid,
    grid_size,
    parse_dimension,
    parse_space,
    space_texts,
    suggest_params,
    values_from_params,
)
from jupyter_trainer.api.sweeps.space_file import load_space_file
from jupyter_trainer.core.errors import SpecError

HOSTILE = ["; rm -rf / #", "$(touch /tmp/x)", "`id`", "a'b\"c", "line\nbreak", "\\x00", "é ☃"]


def study(seed: int = 0, sampler: optuna.samplers.BaseSampler | None = None) -> optuna.Study:
    return optuna.create_study(sampler=sampler or optuna.samplers.RandomSampler(seed=seed))


@pytest.mark.parametrize(
    "text, kind, args",
    [
        ("choice(32, 64, 128)", "choice", (32, 64, 128)),
        ("choice('adam', \"sgd\", None, True, -1.5)", "choice", ("adam", "sgd", None, True, -1.5)),
        ("uniform(0, 1)", "uniform", (0.0, 1.0)),
        ("uniform(-2.5, -1)", "uniform", (-2.5, -1.0)),
        ("loguniform(1e-4,1e-1)", "loguniform", (1e-4, 1e-1)),
        ("quniform(0, 1, 0.25)", "quniform", (0.0, 1.0, 0.25)),
        ("randint(1, 5)", "randint", (1, 5)),
        ("randint(-3, 0)", "randint", (-3, 0)),
        ("normal(-1, 0.5)", "normal", (-1.0, 0.5)),
        ("lognormal(0, 1)", "lognormal", (0.0, 1.0)),
        ("qloguniform(1, 100, 5)", "qloguniform", (1.0, 100.0, 5.0)),
        ("qnormal(10, 2, 1)", "qnormal", (10.0, 2.0, 1.0)),
        ("qlognormal(1, 0.5, 0.5)", "qlognormal", (1.0, 0.5, 0.5)),
        ("  uniform( 0.1 ,  1 )  ", "uniform", (0.1, 1.0)),
        ("0.01", "fixed", (0.01,)),
        ("-3", "fixed", (-3,)),
        ("[64, 32]", "fixed", ([64, 32],)),
        ("{'a': [1, None]}", "fixed", ({"a": [1, None]},)),
        ("True", "fixed", (True,)),
        ("None", "fixed", (None,)),
        ("'quoted'", "fixed", ("quoted",)),
        ("adam", "fixed", ("adam",)),
        ("normal", "fixed", ("normal",)),
        ("os.system", "fixed", ("os.system",)),
        ("/data/set one", "fixed", ("/data/set one",)),
    ],
)
def test_every_form_parses_to_its_dimension(text, kind, args):
    dim = parse_dimension("x", text)
    assert (dim.kind, dim.args) == (kind, args)
    assert repr(dim.args) == repr(args)  # ints stay ints, floats floats, True stays True
    assert parse_dimension("x", dim.text) == dim


def test_non_string_values_are_fixed_and_dimensions_are_kept():
    assert parse_dimension("layers", [64, 32]) == Dimension("fixed", ([64, 32],))
    assert parse_dimension("lr", 0.1).text == "0.1"
    assert parse_dimension("flag", None).text == "None"
    dim = Dimension("randint", (0, 4))
    assert parse_dimension("n", dim) is dim


@pytest.mark.parametrize("value", HOSTILE)
def test_hostile_strings_are_values_unchanged(value):
    dim = parse_dimension("cmd", f"choice({value!r}, 'safe')")
    assert dim.args == (value, "safe")
    assert parse_dimension("cmd", dim.text) == dim
    assert parse_dimension("cmd", repr(value)).args == (value,)
    trial = study().ask()
    assert Dimension("choice", (value,)).suggest(trial, "cmd") == value


def test_unquoted_shell_text_is_a_fixed_string():
    assert parse_dimension("cmd", "; rm -rf / #").args == ("; rm -rf / #",)
    assert parse_dimension("cmd", "$(touch /tmp/x)").args == ("$(touch /tmp/x)",)


def test_nothing_in_an_expression_is_evaluated(tmp_path):
    marker = tmp_path / "pwned"
    for text in [
        f"choice(__import__('os').system('touch {marker}'))",
        f"__import__('os').system('touch {marker}')",
        f"uniform(0, open('{marker}', 'w').write('x'))",
        f"[__import__('os').system('touch {marker}')]",
        f"(lambda: __import__('os').system('touch {marker}'))()",
        f"choice(*[open('{marker}', 'w')])",
    ]:
        with pytest.raises(SpecError, match="sweep x="):
            parse_dimension("x", text)
    assert not marker.exists()


@pytest.mark.parametrize(
    "text, fragments",
    [
        ("choice(adam, sgd)", ["adam is not a literal", "strings in quotes"]),
        (
            "choice(os.sep)",
            ["os.sep is not a literal", "nothing in a sweep expression is evaluated"],
        ),
        ("choice(uniform(0, 1))", ["uniform(0, 1) is not a literal"]),
        ("choice(x=1)", ["by position only", "choice(a, b, ...)"]),
        ("uniform(lo=0, hi=1)", ["by position only", "uniform(lo, hi)"]),
        ("foo(1, 2)", ["foo(...) is not a distribution", "loguniform(lo, hi)"]),
        ("os.path.join('a')", ["os.path.join(...) is not a distribution"]),
        ("__import__('os')", ["__import__(...) is not a distribution"]),
        ("uniform[0, 1]", ["a single call with literal arguments", "uniform(lo, hi)"]),
        ("[uniform(0, 1)]", ["a single call with literal arguments"]),
        ("loguniform(1e-4, 1e-1", ["a single call with literal arguments"]),
        ("choice()", ["at least one value", "choice('adam', 'sgd')"]),
        ("choice([1, 2], [3])", ["numbers, strings, booleans or None", "one key per element"]),
        ("choice(1, 1.0)", ["lists a value twice", "keep each value once"]),
        ("choice(1, True)", ["lists a value twice"]),
        ("choice(1e400)", ["finite"]),
        ("uniform(1, 0)", ["needs lo < hi", "smaller bound first"]),
        ("uniform(1, 1)", ["needs lo < hi"]),
        ("uniform(0, 1e400)", ["finite numbers"]),
        ("uniform('a', 1)", ["takes numbers"]),
        ("uniform(True, 2)", ["takes numbers"]),
        ("uniform(0)", ["takes 2 numbers, got 1"]),
        ("loguniform(0, 1)", ["needs lo > 0", "use uniform(lo, hi)"]),
        ("loguniform(-1, 1)", ["needs lo > 0"]),
        ("quniform(0, 1, 0)", ["step q > 0"]),
        ("quniform(0, 1, 2)", ["larger than hi - lo", "make q smaller"]),
        ("quniform(0, 1)", ["takes 3 numbers"]),
        ("quniform(0, 1, 1e-300)", ["too many steps", "larger q"]),
        ("randint(3, 3)", ["hi is excluded", "randint(3, 4)"]),
        ("randint(5, 1)", ["hi is excluded", "greater than lo"]),
        ("randint(0.5, 3)", ["whole numbers", "uniform(lo, hi)"]),
        ("randint(0, 10**6)", ["10**6 is not a literal"]),
        ("normal(0, 0)", ["sigma > 0"]),
        ("normal(0, -1)", ["sigma > 0"]),
        ("lognormal(0, 0)", ["sigma > 0"]),
        ("qnormal(0, 1, 0)", ["step q > 0"]),
        ("qlognormal(0, 1)", ["takes 3 numbers"]),
        ("qloguniform(0, 1, 0.1)", ["lo > 0"]),
        ("qloguniform(1, 10, -1)", ["step q > 0"]),
        ("qloguniform(10, 1, 1)", ["lo < hi"]),
        ("1, 2", ["must be JSON", "choice(1, 2)"]),
        ("{1, 2}", ["must be JSON"]),
        ("b'x'", ["must be JSON"]),
        ("1j", ["must be JSON"]),
        ("", ["has no expression", "x=EXPR"]),
        ("   ", ["has no expression"]),
    ],
)
def test_bad_expressions_name_the_key_the_problem_and_the_fix(text, fragments):
    with pytest.raises(SpecError) as caught:
        parse_dimension("x", text)
    message = str(caught.value)
    assert message.startswith("sweep x=")
    for fragment in fragments:
        assert fragment in message


@pytest.mark.parametrize("key", ["1x", "a-b", "a b", "", "class", "lambda", "é", None, 3])
def test_keys_must_be_identifiers(key):
    with pytest.raises(SpecError, match="is not a Python identifier.*for example lr"):
        parse_dimension(key, "uniform(0, 1)")


def test_a_fixed_value_from_the_api_must_be_json():
    with pytest.raises(SpecError, match=r"sweep when=.*must be JSON.*got a set"):
        parse_dimension("when", {1, 2})
    with pytest.raises(SpecError, match="must be JSON"):
        parse_dimension("x", float("nan"))


def test_dimensions_built_directly_are_validated():
    with pytest.raises(SpecError, match="unknown distribution 'beta'"):
        Dimension("beta", (1, 2))
    with pytest.raises(SpecError, match="needs lo < hi"):
        Dimension("uniform", (2, 1))
    with pytest.raises(SpecError, match="exactly one value"):
        Dimension("fixed", (1, 2))


def test_parse_space_from_flags_and_mappings():
    flags = ["lr=loguniform(1e-4,1e-1)", "hidden = choice(32, 64, 128)", "opt=adam", "expr=a=b"]
    space = parse_space(flags)
    assert list(space) == ["lr", "hidden", "opt", "expr"]
    assert space["hidden"] == Dimension("choice", (32, 64, 128))
    assert space["opt"].args == ("adam",) and space["expr"].args == ("a=b",)
    assert parse_space(
        {"lr": "loguniform(1e-4, 0.1)", "layers": [1, 2], "n": Dimension("randint", (0, 3))}
    ) == {
        "lr": space["lr"],
        "layers": Dimension("fixed", ([1, 2],)),
        "n": Dimension("randint", (0, 3)),
    }
    assert parse_space("lr=uniform(0, 1)") == {"lr": Dimension("uniform", (0.0, 1.0))}


def test_parse_space_errors():
    with pytest.raises(SpecError, match=r"at least one --sweep KEY=EXPR, for example --sweep lr="):
        parse_space([])
    with pytest.raises(SpecError, match="at least one"):
        parse_space({})
    with pytest.raises(SpecError, match="at least one"):
        parse_space(None)
    with pytest.raises(SpecError, match=r"--sweep takes KEY=EXPR, got 'lr'; for example"):
        parse_space(["lr"])
    with pytest.raises(SpecError, match="--sweep takes KEY=EXPR, got 3"):
        parse_space([3])
    with pytest.raises(
        SpecError,
        match=r"the sweep key 'lr' is given twice "
        r"\('lr=uniform\(0, 1\)', then ' lr =0.1'\); keep the "
        r"one you mean",
    ):
        parse_space(["lr=uniform(0, 1)", " lr =0.1"])
    with pytest.raises(SpecError, match="sweep key '2lr' is not a Python identifier"):
        parse_space(["2lr=0.1"])


def test_space_texts_round_trip():
    space = parse_space(
        [
            "lr=loguniform(1e-4, 1e-1)",
            "h=choice(32, 64)",
            "q=quniform(0, 1, 0.1)",
            "n=randint(0, 3)",
            "z=normal(0, 1)",
            "opt=adam",
            "cmd=choice('; rm -rf / #', '$(x)')",
        ]
    )
    texts = space_texts(space)
    assert texts == {
        "lr": "loguniform(0.0001, 0.1)",
        "h": "choice(32, 64)",
        "q": "quniform(0.0, 1.0, 0.1)",
        "n": "randint(0, 3)",
        "z": "normal(0.0, 1.0)",
        "opt": "'adam'",
        "cmd": "choice('; rm -rf / #', '$(x)')",
    }
    assert parse_space(texts) == space


SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=20),
)
JSON = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=10,
)
FLOATS = st.floats(min_value=-1e9, max_value=1e9, allow_nan=False)


@st.composite
def dimensions(draw) -> Dimension:
    kind = draw(
        st.sampled_from(
            ["choice", "uniform", "loguniform", "quniform", "randint", "normal", "fixed"]
        )
    )
    if kind == "choice":
        args = draw(st.lists(SCALARS, min_size=1, max_size=6, unique_by=lambda v: v))
    elif kind == "fixed":
        args = [draw(JSON)]
    elif kind == "randint":
        lo = draw(st.integers(-(10**12), 10**12))
        args = [lo, lo + draw(st.integers(1, 10**6))]
    elif kind == "loguniform":
        args = sorted(draw(st.lists(st.floats(1e-12, 1e12), min_size=2, max_size=2)))
    elif kind == "normal":
        args = [draw(FLOATS), draw(st.floats(1e-9, 1e9))]
    else:
        args = sorted(draw(st.lists(FLOATS, min_size=2, max_size=2)))
        if kind == "quniform":
            args.append(draw(st.floats(1e-3, 1e6)))
    try:
        return Dimension(kind, tuple(args))
    except SpecError:
        assume(False)


@settings(max_examples=300, deadline=None)
@given(dimensions())
def test_canonical_text_parses_back_to_the_same_dimension(dim):
    again = parse_dimension("key", dim.text)
    assert again == dim
    assert repr(again.args) == repr(dim.args)
    assert again.text == dim.text


@settings(max_examples=100, deadline=None)
@given(
    st.dictionaries(
        st.from_regex(r"[a-z_][a-z0-9_]{0,8}", fullmatch=True).filter(
            lambda k: (
                k not in {"if", "in", "is", "or", "as", "def", "for", "and", "not", "del", "try"}
            )
        ),
        dimensions(),
        min_size=1,
        max_size=5,
    )
)
def test_a_stored_space_parses_back_equal(space):
    assert parse_space(space_texts(space)) == space


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=40))
def test_any_string_in_a_choice_comes_back_unchanged(value):
    assert parse_dimension("s", f"choice({value!r})").args == (value,)


def test_a_yaml_space_file(tmp_path):
    path = tmp_path / "space.yaml"
    path.write_text(
        "lr: loguniform(1e-4, 1e-1)\nhidden: choice(32, 64, 128)\nopt: adam\n"
        "layers: [64, 32]\ndecay: 1e-3\ncmd: \"choice('; rm -rf / #')\"\n"
    )
    data = load_space_file(path)
    assert data["layers"] == [64, 32] and data["opt"] == "adam"
    space = parse_space(data)
    assert space["lr"] == Dimension("loguniform", (1e-4, 0.1))
    assert space["hidden"] == Dimension("choice", (32, 64, 128))
    assert space["opt"].args == ("adam",) and space["layers"].args == ([64, 32],)
    assert space["decay"].args == (0.001,)  # YAML reads 1e-3 as a string; the space reads it
    assert space["cmd"].args == ("; rm -rf / #",)


@pytest.mark.parametrize(
    "content, fragments",
    [
        ("lr: [1, 2\n", ["is not valid YAML", "line 2", "lines like lr: loguniform"]),
        ("- lr\n- hidden\n", ["holds a list", "map each key to an expression"]),
        ("", ["is empty", "for example lr: loguniform"]),
        ("lr: uniform(0, 1)\nlr: 0.1\n", ["is not valid YAML", "the key 'lr' is given twice"]),
        ("!!python/object/apply:os.system ['true']\n", ["is not valid YAML"]),
    ],
)
def test_bad_yaml_files_are_named_with_the_fix(tmp_path, content, fragments):
    path = tmp_path / "space.yaml"
    path.write_text(content)
    with pytest.raises(SpecError) as caught:
        load_space_file(path)
    message = str(caught.value)
    assert str(path) in message
    for fragment in fragments:
        assert fragment in message


def test_a_missing_or_unreadable_yaml_file(tmp_path):
    with pytest.raises(SpecError, match=r"space file .*nope.yaml does not exist; check the path"):
        load_space_file(tmp_path / "nope.yaml")
    with pytest.raises(SpecError, match="cannot read the sweep space file"):
        load_space_file(tmp_path)
    (tmp_path / "latin1.yaml").write_bytes(b"opt: \xe9\n")
    with pytest.raises(SpecError, match="is not UTF-8 text"):
        load_space_file(tmp_path / "latin1.yaml")


def billion_laughs(levels: int = 9) -> str:
    """Nine lists of nine aliases of the list before: 9**9 strings once expanded."""
    lines = ["l0: &l0 [" + ", ".join(['"lol"'] * 9) + "]"]
    lines += [f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (512 << 20, 512 << 20))


def test_a_billion_laughs_sweep_file_is_refused_at_once_in_little_memory(home, tmp_path):
    (tmp_path / "laughs.yaml").write_text(billion_laughs())
    (tmp_path / "train.py").write_text(
        "from jupyter_trainer import runtime as jt\njt.log(step=0, score=1.0)\n"
    )
    began = time.monotonic()
    try:  # in 512 MiB of address space, within 30 s
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "jupyter_trainer.frontends.cli",
                "sweep",
                str(tmp_path / "train.py"),
                "--sweep-file",
                str(tmp_path / "laughs.yaml"),
                "--metric",
                "score",
                "--launcher",
                "python",
            ],
            capture_output=True,
            text=True,
            timeout=30,
            preexec_fn=limit_memory,
        )
    except subprocess.TimeoutExpired:
        pytest.fail("reading the sweep file did not end within 30 s")
    assert time.monotonic() - began < 15
    lines = done.stderr.splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr[-2000:]
    assert (
        "laughs.yaml holds more than 100000 values once its aliases (*name) are expanded"
        in lines[0]
        and "write its values out" in lines[0]
    )
    assert not (home / "sweeps").exists()


@pytest.mark.parametrize(
    "content, fragment",
    [
        ("a: &a 1\nb: [" + ", ".join(["*a"] * 101) + "]\n", "uses more than 100 aliases (*name)"),
        ("a: &a [1, *a]\n", "has an alias (*name) inside the value it names"),
        ("a: " + "x" * (256 << 10) + "\n", "is larger than 256 KiB"),
        ("a: " + "[" * 50_000 + "]" * 50_000 + "\n", "nests its values too deeply"),
    ],
)
def test_a_sweep_file_past_a_limit_is_refused_with_the_fix(tmp_path, content, fragment):
    path = tmp_path / "space.yaml"
    path.write_text(content)
    with pytest.raises(SpecError) as caught:
        load_space_file(path)
    assert str(path) in str(caught.value) and fragment in str(caught.value)


def test_a_sweep_file_may_alias_a_few_values(tmp_path):
    path = tmp_path / "space.yaml"
    path.write_text(
        "sizes: &sizes [64, 32]\nencoder: *sizes\ndecoder: *sizes\nlr: loguniform(1e-4, 1e-1)\n"
    )
    assert load_space_file(path) == {
        "sizes": [64, 32],
        "encoder": [64, 32],
        "decoder": [64, 32],
        "lr": "loguniform(1e-4, 1e-1)",
    }


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
