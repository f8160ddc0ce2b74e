"""What a target costs, for the cost meter: ``price_per_gpu_hour`` (a rank's GPU, an hour)
or ``price_per_node_hour`` (a node, an hour), and the ``currency`` shown with the figures
(default ``$``). Any target kind takes these keys; they are taken out of its configuration
here, before the kind reads the rest, and recorded with each run (``spec.target.price``)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ..core.errors import TargetError

RATES = ("price_per_gpu_hour", "price_per_node_hour")
KEYS = (*RATES, "currency")


def split_price(name: str, config: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the target's price, the rest of its configuration); a bad price says so."""
    price = {k: config[k] for k in KEYS if k in config}
    rest = {k: v for k, v in config.items() if k not in KEYS}
    rates = [k for k in RATES if k in price]
    if len(rates) > 1:
        raise TargetError(
            f"target {name!r}: give price_per_gpu_hour or price_per_node_hour, not both"
        )
    for key in rates:
        value = price[key]
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not math.isfinite(value)
            or value < 0
        ):
            raise TargetError(
                f"target {name!r}: {key} must be a number of 0 or more (what an hour "
                f"costs), got {value!r}"
            )
    currency = price.get("currency")
    if currency is not None and (
        not isinstance(currency, str) or not currency.strip() or len(currency) > 8
    ):
        raise TargetError(
            f'target {name!r}: currency must be a short text such as "$" or "EUR", got {currency!r}'
        )
    if "currency" in price and not rates:
        raise TargetError(
            f"target {name!r}: currency needs price_per_gpu_hour or price_per_node_hour"
        )
    return price, rest
