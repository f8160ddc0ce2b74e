"""The one redaction every record and message goes through: the rank side's ``redact``
(a rank masks its saved locals with the same rule), under the name core and the layers
above it import. See that module for what counts as a secret."""

from __future__ import annotations

from ..rankside.redaction.redact import (
    MASK,
    holds_secret,
    redact,
    redact_object,
    redact_text,
    redact_url,
    secret_name,
    words,
)

__all__ = [
    "MASK",
    "holds_secret",
    "redact",
    "redact_object",
    "redact_text",
    "redact_url",
    "secret_name",
    "words",
]
