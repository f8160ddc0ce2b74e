"""``azure.ai.ml.sweep`` search space expressions (and their YAML dict forms), as the
expressions of a sweep here, through v1's (``hyperdrive.parameter_expressions``): v2 kept
v1's meanings (``LogUniform``'s bounds are exponents, ``Randint(upper)`` is 0..upper-1)."""

from __future__ import annotations

from typing import Any

from .....azureml.train.hyperdrive import parameter_expressions as v1
from ..exceptions import ValidationException


class SweepDistribution:
    type = ""

    def expression(self) -> str:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}: {self.expression()}"


class Choice(SweepDistribution):
    type = "choice"

    def __init__(self, values: list[Any] | None = None, **kwargs: Any) -> None:
        self.values = list(values or [])

    def expression(self) -> str:
        return v1.choice(self.values)


class Randint(SweepDistribution):
    type = "randint"

    def __init__(self, upper: int | None = None, **kwargs: Any) -> None:
        self.upper = upper

    def expression(self) -> str:
        return v1.randint(self.upper)  # type: ignore[arg-type]


class Uniform(SweepDistribution):
    type = "uniform"
    _v1 = staticmethod(v1.uniform)

    def __init__(self, min_value: Any = None, max_value: Any = None, **kw: Any):
        self.min_value = min_value
        self.max_value = max_value

    def expression(self) -> str:
        return type(self)._v1(self.min_value, self.max_value)


class LogUniform(Uniform):
    type = "loguniform"
    _v1 = staticmethod(v1.loguniform)


class QUniform(SweepDistribution):
    type = "quniform"
    _v1 = staticmethod(v1.quniform)

    def __init__(self, min_value: Any = None, max_value: Any = None, q: Any = None, **kw: Any):
        self.min_value = min_value
        self.max_value = max_value
        self.q = q

    def expression(self) -> str:
        return type(self)._v1(self.min_value, self.max_value, self.q)


class QLogUniform(QUniform):
    type = "qloguniform"
    _v1 = staticmethod(v1.qloguniform)


class Normal(SweepDistribution):
    type = "normal"
    _v1 = staticmethod(v1.normal)

    def __init__(self, mu: Any = None, sigma: Any = None, **kw: Any):
        self.mu = mu
        self.sigma = sigma

    def expression(self) -> str:
        return type(self)._v1(self.mu, self.sigma)


class LogNormal(Normal):
    type = "lognormal"
    _v1 = staticmethod(v1.lognormal)


class QNormal(SweepDistribution):
    type = "qnormal"
    _v1 = staticmethod(v1.qnormal)

    def __init__(self, mu: Any = None, sigma: Any = None, q: Any = None, **kw: Any):
        self.mu = mu
        self.sigma = sigma
        self.q = q

    def expression(self) -> str:
        return type(self)._v1(self.mu, self.sigma, self.q)


class QLogNormal(QNormal):
    type = "qlognormal"
    _v1 = staticmethod(v1.qlognormal)


KINDS: dict[str, type[SweepDistribution]] = {
    k.type: k
    for k in (
        Choice,
        Randint,
        Uniform,
        LogUniform,
        QUniform,
        QLogUniform,
        Normal,
        LogNormal,
        QNormal,
        QLogNormal,
    )
}


def distribution_of(value: Any) -> SweepDistribution | None:
    """The search space expression a value is (an object or its YAML dict), or None."""
    if isinstance(value, SweepDistribution):
        return value
    if isinstance(value, dict) and "type" in value and str(value["type"]).lower() in KINDS:
        fields = {k: v for k, v in value.items() if k != "type"}
        return KINDS[str(value["type"]).lower()](**fields)
    if isinstance(value, dict) and "type" in value and "path" not in value:
        raise ValidationException(
            f"search space type {value['type']!r}: use one of {', '.join(sorted(KINDS))}"
        )
    return None


__all__ = [
    "Choice",
    "LogNormal",
    "LogUniform",
    "Normal",
    "QLogNormal",
    "QLogUniform",
    "QNormal",
    "QUniform",
    "Randint",
    "Uniform",
]
