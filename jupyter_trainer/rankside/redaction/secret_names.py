"""Which names are a secret's: one rule for params, variables, dict keys, fields, a URL's
query parameters and ``NAME=value`` pairs in text.

A name is split into words at ``_ . -``, spaces and camelCase humps; it is a secret's when
its last word is ``token``, ``password``/``passwd``/``passphrase``/``pwd``/``pass``,
``secret``, ``credential(s)``, ``auth``/``authorization``, ``apikey``, ``cookie``, ``dsn``,
or ``key`` after another word (``api_key``, ``aws_secret_access_key``; not ``sort_key``).
So ``hf_token``, ``wandb_api_key`` and ``DB_PASSWORD`` are, and ``tokenizer``,
``max_tokens``, ``num_keys``, ``monkey``, ``keyboard``, ``password_file`` and ``pad_token``
(a vocabulary entry) are not. Standard library only: copied into every snapshot.
"""

from __future__ import annotations

import re

_SECRET_LAST = frozenset(
    {
        "token",
        "password",
        "passwords",
        "passwd",
        "passphrase",
        "pwd",
        "pass",
        "secret",
        "secrets",
        "credential",
        "credentials",
        "creds",
        "auth",
        "authorization",
        "apikey",
        "cookie",
        "dsn",
    }
)
# words before "token" that make it a vocabulary entry, not a credential (pad_token="<pad>")
_VOCABULARY = frozenset(
    {"pad", "eos", "bos", "unk", "cls", "sep", "mask", "sos", "start", "end", "special"}
)
# words before "key" that make it a lookup key, not a credential
_LOOKUP = frozenset(
    {"sort", "primary", "foreign", "cache", "dict", "group", "partition", "metric", "monitor",
     "join", "index", "lookup", "hash", "shard", "map", "row", "column", "batch", "rng", "seed",
     "prng", "random", "input", "label", "target", "image", "text", "feature", "output"}
)  # fmt: skip
_WORD_BREAK = re.compile(r"[\W_]+|(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


def words(name: str) -> list[str]:
    """``name``'s words, lower case: ``HF_TOKEN``, ``hfToken`` and ``hf.token`` all give
    ``['hf', 'token']``."""
    return [w.lower() for w in _WORD_BREAK.split(name) if w]


def secret_name(name: str) -> bool:
    """Whether a value called ``name`` is a secret whatever it holds."""
    parts = words(name)
    if not parts:
        return False
    last, before = parts[-1], parts[-2] if len(parts) > 1 else ""
    if last == "key":
        return bool(before) and before not in _LOOKUP
    if last == "token":
        return before not in _VOCABULARY
    return last in _SECRET_LAST
