"""``azureml.train.hyperdrive`` parameter expressions, as the expressions of a sweep here
(``api/sweeps/space.py``).

v1's ``loguniform(min_value, max_value)`` draws ``exp(uniform(min_value, max_value))``: its
bounds are exponents, so it becomes ``loguniform(exp(min_value), exp(max_value))``, and
``qloguniform`` likewise. v1's ``randint(upper)`` is ``randint(0, upper)``. ``lognormal``,
``qnormal`` and ``qlognormal`` keep their arguments.
"""

from __future__ import annotations

import math
from typing import Any

from ...errors import UserErrorException


class Expression(str):
    """A sweep expression (``"uniform(0.01, 0.1)"``), as a v1 expression is passed around."""


def _literal(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        raise UserErrorException(f"a parameter value is a number or a string, not {value!r}")
    if isinstance(value, (int, float, str)):
        return repr(value)
    raise UserErrorException(f"a parameter value is a number or a string, not {value!r}")


def choice(*options: Any) -> Expression:
    """``choice(1, 2, 3)``, ``choice([1, 2, 3])`` or ``choice(range(1, 4))``."""
    if len(options) == 1 and isinstance(options[0], (list, tuple, range)):
        options = tuple(options[0])
    if not options:
        raise UserErrorException("choice() needs at least one option")
    return Expression(f"choice({', '.join(_literal(o) for o in options)})")


def randint(upper: int) -> Expression:
    if type(upper) is not int or upper < 1:
        raise UserErrorException(
            f"randint(upper) takes a whole number of at least 1, got {upper!r}"
        )
    return Expression(f"randint(0, {upper})")


def uniform(min_value: float, max_value: float) -> Expression:
    return Expression(f"uniform({_literal(min_value)}, {_literal(max_value)})")


def quniform(min_value: float, max_value: float, q: float) -> Expression:
    return Expression(f"quniform({_literal(min_value)}, {_literal(max_value)}, {_literal(q)})")


def loguniform(min_value: float, max_value: float) -> Expression:
    """v1's bounds are exponents: ``exp(uniform(min_value, max_value))``."""
    return Expression(f"loguniform({math.exp(min_value)!r}, {math.exp(max_value)!r})")


def normal(mu: float, sigma: float) -> Expression:
    return Expression(f"normal({_literal(mu)}, {_literal(sigma)})")


def qloguniform(min_value: float, max_value: float, q: float) -> Expression:
    """v1's bounds are exponents: ``round(exp(uniform(min_value, max_value)) / q) * q``."""
    return Expression(
        f"qloguniform({math.exp(min_value)!r}, {math.exp(max_value)!r}, {_literal(q)})"
    )


def qnormal(mu: float, sigma: float, q: float) -> Expression:
    return Expression(f"qnormal({_literal(mu)}, {_literal(sigma)}, {_literal(q)})")


def lognormal(mu: float, sigma: float) -> Expression:
    return Expression(f"lognormal({_literal(mu)}, {_literal(sigma)})")


def qlognormal(mu: float, sigma: float, q: float) -> Expression:
    return Expression(f"qlognormal({_literal(mu)}, {_literal(sigma)}, {_literal(q)})")


__all__ = [
    "choice",
    "lognormal",
    "loguniform",
    "normal",
    "qlognormal",
    "qloguniform",
    "qnormal",
    "quniform",
    "randint",
    "uniform",
]
