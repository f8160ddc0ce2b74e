"""Credentials in URLs, kept out of everything that is recorded or shown: the rank side's
``url_secrets`` (a rank redacts with the same rule), under the name core and the layers
above it import. See that module for what counts as a secret."""

from __future__ import annotations

from ..rankside.redaction.url_secrets import (
    MASK,
    is_redacted,
    redact,
    scrub,
    secrets_in,
    without_userinfo,
)

__all__ = ["MASK", "is_redacted", "redact", "scrub", "secrets_in", "without_userinfo"]
