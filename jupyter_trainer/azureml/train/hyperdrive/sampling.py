"""``azureml.train.hyperdrive`` samplers, as a sweep's sampler here (Optuna's): random,
grid, and TPE for v1's Bayesian sampling (a Bayesian optimiser too; v1 did not say which)."""

from __future__ import annotations

import re
from typing import Any

from ...errors import NotSupported, UserErrorException

_DASHES = re.compile(r"^-{1,2}")


class HyperParameterSampling:
    sampler = "random"

    def __init__(self, parameter_space: dict[str, Any], properties: Any = None) -> None:
        if not isinstance(parameter_space, dict) or not parameter_space:
            raise UserErrorException("parameter_space is a mapping of names to expressions")
        self.parameter_space = dict(parameter_space)

    def space(self) -> dict[str, str]:
        """Param name -> expression (``--learning_rate`` is the param ``learning_rate``)."""
        out: dict[str, str] = {}
        for key, expression in self.parameter_space.items():
            name = param_name(key)
            if name in out:
                raise UserErrorException(f"two parameters are both {name!r} once their dashes go")
            out[name] = str(expression)
        return out

    def arguments(self) -> list[str]:
        """What each trial's script is given: ``--KEY ${{params.NAME}}`` per parameter, the
        key as v1 wrote it (``--`` added where it had none, as v1 passed it)."""
        args: list[str] = []
        for key in self.parameter_space:
            args += [
                key if key.startswith("-") else f"--{key}",
                f"${{{{params.{param_name(key)}}}}}",
            ]
        return args


def param_name(key: str) -> str:
    name = _DASHES.sub("", str(key)).replace("-", "_")
    if not name.isidentifier():
        raise UserErrorException(
            f"parameter {key!r}: a name of letters, digits and _ (with -- in front if the "
            "script takes it so)"
        )
    return name


class RandomParameterSampling(HyperParameterSampling):
    sampler = "random"


class GridParameterSampling(HyperParameterSampling):
    sampler = "grid"

    def __init__(self, parameter_space: dict[str, Any], properties: Any = None) -> None:
        super().__init__(parameter_space, properties)
        for key, expression in self.parameter_space.items():
            if not str(expression).startswith("choice("):
                raise UserErrorException(
                    f"grid sampling takes choice() only, and {key!r} is {expression}"
                )


class BayesianParameterSampling(HyperParameterSampling):
    sampler = "tpe"


class SobolParameterSampling(HyperParameterSampling):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise NotSupported("SobolParameterSampling", "use RandomParameterSampling")


__all__ = [
    "BayesianParameterSampling",
    "GridParameterSampling",
    "RandomParameterSampling",
]
