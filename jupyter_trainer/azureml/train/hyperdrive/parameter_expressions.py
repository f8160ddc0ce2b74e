"""``azureml.train.hyperdrive`` parameter expressions, as the expressions of a sweep here
(``api/sweeps/space.py``).

v1's ``loguniform(min_value, max_value)`` draws ``exp(uniform(min_value, max_value))``: its
bounds are exponents, so it becomes ``loguniform(exp(min_value), exp(max_value))``. v1's
``randint(upper)`` is ``randint(0, upper)``. The quantised log and normal forms
(``qloguniform``, ``qnormal``, ``lognormal``, ``qlognormal``) have no counterpart and are
refused when called.
"""

from __future__ import annotations

import math
from typing import Any

from ...errors import NotSupported, UserErrorException


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


def _refused(name: str, fix: str) -> Any:
    def refuse(*args: Any, **kwargs: Any) -> Expression:
        raise NotSupported(f"the parameter expression {name}", fix)

    refuse.__name__ = name
    return refuse


qloguniform = _refused("qloguniform", "use loguniform, or quniform on the exponent")
qnormal = _refused("qnormal", "use normal, or quniform over the range you need")
lognormal = _refused("lognormal", "use loguniform over the range you need")
qlognormal = _refused("qlognormal", "use loguniform over the range you need")

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
