"""The sweep search space: expressions read as data, never evaluated, with clear errors, and
canonical texts that parse back to the same dimension. YAML files are tested in
test_sweep_files.py, grids and the values Optuna trials get in test_sweep_suggest.py."""

from __future__ import annotations

import optuna
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from jupyter_trainer.api.sweeps.space import (
    Dimension,
    parse_dimension,
    parse_space,
    space_texts,
)
from jupyter_trainer.core.errors import SpecError

HOSTILE = ["; rm -rf / #", "$(touch /tmp/x)", "`id`", "a'b\"c", "line\nbreak", "\\x00", "é ☃"]


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
    trial = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0)).ask()
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
