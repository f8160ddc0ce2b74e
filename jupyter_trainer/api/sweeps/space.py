"""A sweep's search space: ``--sweep KEY=EXPR`` read as data, never evaluated.

An expression is one call to a distribution whose arguments are literals, or a plain
value that stays fixed for every trial::

    choice('adam', 'sgd')      one of the listed values
    uniform(lo, hi)            a float in [lo, hi]
    loguniform(lo, hi)         a float in [lo, hi], uniform in log space (lo > 0)
    quniform(lo, hi, q)        a float lo + k*q up to hi (multiples of q from lo)
    randint(lo, hi)            an int with lo <= x < hi: hi is excluded, as in numpy and Ray Tune
    normal(mu, sigma)          a float from the normal distribution
    lognormal(mu, sigma)       exp(normal(mu, sigma)): a positive float
    qloguniform(lo, hi, q)     loguniform(lo, hi) rounded to a multiple of q
    qnormal(mu, sigma, q)      normal(mu, sigma) rounded to a multiple of q
    qlognormal(mu, sigma, q)   lognormal(mu, sigma) rounded to a multiple of q
    0.01, [64, 32], adam       a fixed value (a word that is not a literal is a string)

The text is parsed with ``ast`` and only literal arguments are read (``ast.literal_eval``),
so a value such as ``'$(touch /tmp/x)'`` is a string like any other and nothing in the
text runs. Optuna is imported only by the caller that hands a trial to ``suggest``, which
keeps parsing cheap inside a notebook kernel.
"""

from __future__ import annotations

import ast
import copy
import keyword
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal, DecimalException
from statistics import NormalDist
from typing import TYPE_CHECKING, Any

from ...core.errors import SpecError
from ...core.spec import is_json_value

if TYPE_CHECKING:
    import optuna

KINDS = (
    "choice",
    "uniform",
    "loguniform",
    "quniform",
    "randint",
    "normal",
    "lognormal",
    "qloguniform",
    "qnormal",
    "qlognormal",
    "fixed",
)
FORMS = (
    "choice(a, b, ...), uniform(lo, hi), loguniform(lo, hi), quniform(lo, hi, q), "
    "randint(lo, hi) (hi excluded), normal(mu, sigma), lognormal(mu, sigma), "
    "qloguniform(lo, hi, q), qnormal(mu, sigma, q), qlognormal(mu, sigma, q) or a plain value "
    "such as 0.1 or adam"
)
# Drawn through a quantile of the normal distribution (Optuna has none; see ``suggest``)
NORMAL_KINDS = ("normal", "lognormal", "qnormal", "qlognormal")
MAX_GRID_POINTS = 100_000
NORMAL_QUANTILE_EDGE = 1e-6  # normal() draws its quantile from [edge, 1 - edge]: about ±4.75 sigma

_PLACEHOLDERS = {
    "choice": ("a", "b", "..."),
    "uniform": ("lo", "hi"),
    "loguniform": ("lo", "hi"),
    "quniform": ("lo", "hi", "q"),
    "randint": ("lo", "hi"),
    "normal": ("mu", "sigma"),
    "lognormal": ("mu", "sigma"),
    "qloguniform": ("lo", "hi", "q"),
    "qnormal": ("mu", "sigma", "q"),
    "qlognormal": ("mu", "sigma", "q"),
}
_SCALARS = (str, int, float, bool, type(None))
_LOOKS_LIKE_CALL = re.compile(rf"\s*({'|'.join(KINDS[:-1])})\s*[(\[{{]")
_EXAMPLE = "--sweep lr=loguniform(1e-4, 1e-1)"


@dataclass(frozen=True)
class Dimension:
    """One hyperparameter of the space: a distribution ``kind`` and its ``args``.

    ``fixed`` holds its value as the only argument. Building one validates it, so a
    ``Dimension`` made from the API is as safe as one parsed from text.
    """

    kind: str
    args: tuple = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "args", _checked_args(self.kind, tuple(self.args)))

    @property
    def text(self) -> str:
        """The canonical expression; ``parse_dimension(key, d.text) == d``."""
        if self.kind == "fixed":
            return repr(self.args[0])
        return f"{self.kind}({', '.join(repr(a) for a in self.args)})"

    @property
    def is_fixed(self) -> bool:
        return self.kind == "fixed"

    def suggest(self, trial: optuna.trial.Trial, name: str) -> Any:
        """The value of this dimension for ``trial``, recorded in Optuna under ``name``.

        What Optuna sees: ``choice`` a categorical, ``uniform``/``loguniform`` a float
        (log-scaled), ``quniform`` a float with ``step=q`` whose top is ``hi`` lowered to
        the last multiple of q (the value is then written as ``lo + k*q`` in decimal, so
        steps of 0.1 give 0.3 rather than 0.30000000000000004), ``randint`` an int from lo
        to hi - 1. Optuna has no normal distribution: it sees the quantile u in
        [1e-6, 1 - 1e-6] under ``"<name>:quantile"`` and the value is
        ``mu + sigma * inv_cdf(u)``; ``trial.params`` has no ``name`` then, and
        ``values_from_params`` turns the params back into values. ``fixed`` is not
        suggested at all.
        """
        kind, args = self.kind, self.args
        if kind == "fixed":
            return copy.deepcopy(args[0])
        if kind == "choice":
            return trial.suggest_categorical(name, list(args))
        if kind in ("uniform", "loguniform"):
            return trial.suggest_float(name, args[0], args[1], log=kind == "loguniform")
        if kind == "qloguniform":
            return self._from_optuna(trial.suggest_float(name, args[0], args[1], log=True))
        if kind == "quniform":
            lo, hi, q = args
            value = trial.suggest_float(name, lo, _quniform_top(lo, hi, q), step=q)
            return self._from_optuna(value)
        if kind == "randint":
            return trial.suggest_int(name, args[0], args[1] - 1)
        edge = NORMAL_QUANTILE_EDGE
        return self._from_optuna(trial.suggest_float(quantile_name(name), edge, 1 - edge))

    def _from_optuna(self, value: Any) -> Any:
        """The value a trial gets for what Optuna recorded (see ``suggest``)."""
        if self.kind == "quniform":
            lo, _, q = (Decimal(repr(a)) for a in self.args)
            return float(lo + round((Decimal(repr(float(value))) - lo) / q) * q)
        if self.kind == "qloguniform":
            return _multiple(float(value), self.args[2])
        if self.kind in NORMAL_KINDS:
            edge = NORMAL_QUANTILE_EDGE
            u = min(max(float(value), edge), 1 - edge)
            drawn = self.args[0] + self.args[1] * NormalDist().inv_cdf(u)
            if self.kind in ("lognormal", "qlognormal"):
                drawn = math.exp(drawn)
            return _multiple(drawn, self.args[2]) if self.kind[0] == "q" else drawn
        return value

    def grid_values(self) -> list:
        """Every value a grid search tries: choice's values, quniform's steps from lo,
        randint's ints below hi, or the fixed value."""
        count = self._grid_count()
        if self.kind == "quniform":
            lo, _, q = (Decimal(repr(a)) for a in self.args)
            return [float(lo + k * q) for k in range(count)]
        if self.kind == "randint":
            return list(range(*self.args))
        return list(self.args)

    def _grid_count(self) -> int:
        if self.kind in ("choice", "fixed"):
            return len(self.args)
        if self.kind == "randint":
            count = self.args[1] - self.args[0]
        elif self.kind == "quniform":
            count = _quniform_steps(*self.args) + 1
        else:
            raise SpecError(
                f"a grid needs a finite list of values and {self.text} is continuous; write it "
                "as choice(a, b, ...), quniform(lo, hi, q) or randint(lo, hi), or pick another "
                "sampler (random, tpe or gp)"
            )
        if count > MAX_GRID_POINTS:
            raise SpecError(
                f"{self.text} has {count} grid values, more than {MAX_GRID_POINTS}; "
                "narrow the range or take a larger step, or pick another sampler "
                "(random, tpe or gp)"
            )
        return count


def _multiple(value: float, q: float) -> float:
    """``value`` rounded to the nearest multiple of ``q``, written in decimal (0.3, not
    0.30000000000000004)."""
    step = Decimal(repr(q))
    return float(round(Decimal(repr(value)) / step) * step)


def quantile_name(name: str) -> str:
    """The name Optuna records a ``normal`` dimension's quantile under."""
    return f"{name}:quantile"


def parse_dimension(key: str, text_or_value: Any) -> Dimension:
    """Read one dimension: a ``str`` is an expression (see the module docstring); any
    other value (from the API or a YAML file) is fixed, and a ``Dimension`` is kept.

    To sweep from the API pass the expression as a string, e.g. ``"choice(32, 64)"``:
    a Python list is one fixed list value, not a choice.
    """
    check_key(key)
    if isinstance(text_or_value, Dimension):
        return text_or_value
    if not isinstance(text_or_value, str):
        shown = repr(text_or_value)
        return _dimension(key, shown, "fixed", (text_or_value,))
    text = text_or_value.strip()
    if not text:
        raise SpecError(
            f"sweep {key}= has no expression after '='; write {key}=EXPR with EXPR one of {FORMS}"
        )
    try:
        node = ast.parse(text, mode="eval").body
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        node = None
    if isinstance(node, ast.Call):
        kind, args = _call_parts(key, text, node)
        return _dimension(key, text, kind, args)
    if (
        node is not None and any(isinstance(n, ast.Call) for n in ast.walk(node))
    ) or _LOOKS_LIKE_CALL.match(text):
        raise SpecError(
            f"sweep {key}={text}: an expression is a single call with literal "
            f"arguments, one of {FORMS}"
        )
    try:
        value = ast.literal_eval(node) if node is not None else text
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        value = text
    return _dimension(key, text, "fixed", (value,))


def parse_space(items: Mapping[str, Any] | Iterable[str] | str | None) -> dict[str, Dimension]:
    """Read a whole space from a mapping (key → expression, fixed value or ``Dimension``)
    or from ``KEY=EXPR`` strings as repeated ``--sweep`` flags give them."""
    if isinstance(items, str):
        items = [items]
    if isinstance(items, Mapping):
        pairs = [(key, value, f"{key}={value}") for key, value in items.items()]
    else:
        pairs = [(*_split(item), item) for item in items or ()]
    if not pairs:
        raise SpecError(
            f"a sweep needs at least one --sweep KEY=EXPR, for example {_EXAMPLE} "
            "--sweep hidden=choice(32, 64, 128)"
        )
    space: dict[str, Dimension] = {}
    given: dict[str, str] = {}
    for key, value, item in pairs:
        if key in space:
            raise SpecError(
                f"the sweep key {key!r} is given twice ({given[key]!r}, then "
                f"{item!r}); keep the one you mean"
            )
        space[key] = parse_dimension(key, value)
        given[key] = item
    return space


def space_texts(space: Mapping[str, Dimension]) -> dict[str, str]:
    """Key → canonical expression, for JSON; ``parse_space`` of it gives the space back."""
    return {key: dim.text for key, dim in space.items()}


def suggest_params(trial: optuna.trial.Trial, space: Mapping[str, Dimension]) -> dict[str, Any]:
    """The values of every key for ``trial`` (fixed ones included)."""
    return {key: dim.suggest(trial, key) for key, dim in space.items()}


def values_from_params(params: Mapping[str, Any], space: Mapping[str, Dimension]) -> dict[str, Any]:
    """The values ``suggest_params`` gave, rebuilt from a finished trial's Optuna
    ``params`` (normal quantiles turned into values, fixed keys added). Keys the trial
    never suggested are left out."""
    values: dict[str, Any] = {}
    for key, dim in space.items():
        name = quantile_name(key) if dim.kind in NORMAL_KINDS else key
        if dim.is_fixed:
            values[key] = copy.deepcopy(dim.args[0])
        elif name in params:
            values[key] = dim._from_optuna(params[name])
    return values


def grid(space: Mapping[str, Dimension]) -> dict[str, list]:
    """The search space for ``optuna.samplers.GridSampler``: every suggested key's grid
    values. Fixed keys are left out because ``suggest`` never asks Optuna for them."""
    grid_size(space)
    return {key: dim.grid_values() for key, dim in space.items() if not dim.is_fixed}


def grid_size(space: Mapping[str, Dimension]) -> int:
    """How many trials a full grid search takes; a continuous dimension or a grid over
    ``MAX_GRID_POINTS`` is a ``SpecError``."""
    size = 1
    for key, dim in space.items():
        try:
            size *= dim._grid_count()
        except SpecError as exc:
            raise SpecError(f"sweep {key}={dim.text}: {exc}") from None
    if size > MAX_GRID_POINTS:
        raise SpecError(
            f"the grid has {size} points, more than {MAX_GRID_POINTS}; take fewer "
            "values or pick another sampler (random, tpe or gp) with --trials"
        )
    return size


def check_key(key: object) -> str:
    """Return ``key`` if it can name a notebook variable, else raise ``SpecError``."""
    if (
        not isinstance(key, str)
        or not key.isascii()
        or not key.isidentifier()
        or keyword.iskeyword(key)
    ):
        raise SpecError(
            f"sweep key {key!r} is not a Python identifier; a key names the variable "
            "each trial sets, so use letters, digits and '_', not starting with a "
            "digit (for example lr or hidden_size)"
        )
    return key


def _split(item: object) -> tuple[str, str]:
    if not isinstance(item, str) or "=" not in item:
        raise SpecError(f"--sweep takes KEY=EXPR, got {item!r}; for example {_EXAMPLE}")
    key, _, text = item.partition("=")
    return key.strip(), text


def _call_parts(key: str, text: str, node: ast.Call) -> tuple[str, tuple]:
    func = node.func
    if not isinstance(func, ast.Name) or func.id not in _PLACEHOLDERS:
        name = ast.get_source_segment(text, func) or "it"
        raise SpecError(
            f"sweep {key}={text}: {name}(...) is not a distribution; write one of {FORMS}"
        )
    if node.keywords:
        raise SpecError(
            f"sweep {key}={text}: {func.id}(...) takes its arguments by position "
            f"only, for example {func.id}({', '.join(_PLACEHOLDERS[func.id])})"
        )
    args = []
    for arg in node.args:
        try:
            args.append(ast.literal_eval(arg))
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            shown = ast.get_source_segment(text, arg) or "an argument"
            raise SpecError(
                f"sweep {key}={text}: {shown} is not a literal; arguments are "
                "numbers, or strings in quotes such as choice('adam', 'sgd'); "
                "nothing in a sweep expression is evaluated"
            ) from None
    return func.id, tuple(args)


def _dimension(key: str, text: str, kind: str, args: tuple) -> Dimension:
    try:
        return Dimension(kind, args)
    except SpecError as exc:
        raise SpecError(f"sweep {key}={text}: {exc}") from None


def _checked_args(kind: str, args: tuple) -> tuple:
    """``args`` validated for ``kind`` (numbers as floats where the kind draws floats)."""
    if kind not in KINDS:
        raise SpecError(f"unknown distribution {kind!r}; use one of {', '.join(KINDS)}")
    if kind == "fixed":
        if len(args) != 1:
            raise SpecError(f"a fixed dimension holds exactly one value, got {len(args)}")
        if not is_json_value(args[0]):
            raise SpecError(
                f"a fixed value must be JSON (numbers, strings, booleans, None, lists "
                f"or dicts), got a {type(args[0]).__name__}; write a list as [1, 2], "
                "or choice(1, 2) to sweep over the values"
            )
        return args
    if kind == "choice":
        return _checked_choice(args)
    form = f"{kind}({', '.join(_PLACEHOLDERS[kind])})"
    if len(args) != len(_PLACEHOLDERS[kind]):
        raise SpecError(f"{form} takes {len(_PLACEHOLDERS[kind])} numbers, got {len(args)}")
    if kind == "randint":
        lo, hi = args
        if type(lo) is not int or type(hi) is not int:
            raise SpecError(
                f"{form} takes whole numbers, got randint({lo!r}, {hi!r}); use "
                "uniform(lo, hi) for floats"
            )
        if lo >= hi:
            raise SpecError(
                f"{form} draws lo <= x < hi (hi is excluded, as in numpy and Ray "
                f"Tune), so hi must be greater than lo; for just {lo} write "
                f"randint({lo}, {lo + 1}) or the plain value {lo}"
            )
        return args
    numbers = tuple(_finite(form, a) for a in args)
    lo, hi = numbers[:2]
    if kind in NORMAL_KINDS or kind == "qloguniform":
        if kind in NORMAL_KINDS and hi <= 0:
            raise SpecError(
                f"{form} needs sigma > 0, got {hi!r}; for a fixed value write the number itself"
            )
        if kind[0] == "q" and numbers[2] <= 0:
            raise SpecError(f"{form} needs a step q > 0, got {numbers[2]!r}")
        if kind in NORMAL_KINDS:
            return numbers
    if lo >= hi:
        raise SpecError(
            f"{form} needs lo < hi, got lo={lo!r} and hi={hi!r}; put the smaller bound first"
        )
    if kind in ("loguniform", "qloguniform") and lo <= 0:
        raise SpecError(
            f"{form} needs lo > 0 (a log scale has no 0 or negatives), got "
            f"{lo!r}; use uniform(lo, hi) for a range that includes 0"
        )
    if kind == "quniform":
        q = numbers[2]
        if q <= 0:
            raise SpecError(f"{form} needs a step q > 0, got {q!r}")
        if _quniform_steps(lo, hi, q) < 1:
            raise SpecError(
                f"{form} with q={q!r} larger than hi - lo leaves only lo; make q "
                "smaller or write the plain value"
            )
    return numbers


def _checked_choice(values: tuple) -> tuple:
    if not values:
        raise SpecError("choice(...) needs at least one value, for example choice('adam', 'sgd')")
    for value in values:
        if type(value) not in _SCALARS:
            raise SpecError(
                f"choice(...) values are numbers, strings, booleans or None, got "
                f"a {type(value).__name__} {value!r}; to choose between lists "
                "sweep one key per element"
            )
        if type(value) is float and not math.isfinite(value):
            raise SpecError(f"choice(...) values must be finite numbers, got {value!r}")
    if len(set(values)) != len(values):
        raise SpecError(
            f"choice{values!r} lists a value twice (1, 1.0 and True count as one "
            "value); keep each value once"
        )
    return values


def _finite(form: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SpecError(f"{form} takes numbers, got {value!r}")
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    if not math.isfinite(number):
        raise SpecError(f"{form} takes finite numbers, got {value!r}")
    return number


def _quniform_steps(lo: float, hi: float, q: float) -> int:
    """How many whole steps of q fit in [lo, hi], counted in decimal as Optuna does."""
    try:
        return int((Decimal(repr(hi)) - Decimal(repr(lo))) // Decimal(repr(q)))
    except DecimalException:
        raise SpecError(
            f"quniform({lo!r}, {hi!r}, {q!r}) has too many steps to count "
            "exactly; take a larger q or use uniform(lo, hi)"
        ) from None


def _quniform_top(lo: float, hi: float, q: float) -> float:
    """``hi`` lowered to the last lo + k*q that does not pass it, so Optuna gets a range
    that is a whole number of steps (it would otherwise lower it itself, with a warning)."""
    return float(Decimal(repr(lo)) + _quniform_steps(lo, hi, q) * Decimal(repr(q)))
