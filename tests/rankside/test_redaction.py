"""The one redaction every record and message goes through (``core.redact``): secrets by the
names users give them and by their shapes, at any depth, in URLs, DSNs and free text; and
the names and values that only look like secrets left alone."""

from __future__ import annotations

import argparse
import dataclasses
import json
import string
import types

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jupyter_trainer.core import redact as core_redact
from jupyter_trainer.core.redact import MASK, redact, redact_object, redact_text, secret_name
from jupyter_trainer.core.urls import redact as redact_url
from jupyter_trainer.core.workspace import settings as workspace_settings
from jupyter_trainer.rankside.debug import frame_locals
from jupyter_trainer.rankside.redaction import redact as rank_redact

SECRET = "S3cr3t-v4lue/with@odd+chars"
TOKEN = "hf_" + "a1B2c3D4" * 5


@pytest.mark.parametrize(
    "name",
    [
        "hf_token", "HF_TOKEN", "hfToken", "token", "access_token", "wandb_api_key",
        "WANDB_API_KEY", "api_key", "apiKey", "aws_secret_access_key", "secret_key",
        "password", "db_password", "DB_PASSWORD", "passwd", "passphrase", "pwd", "db_pass",
        "secret", "client_secret", "credential", "credentials", "auth", "basic_auth",
        "authorization", "dsn", "sentry.dsn", "session-token", "github_pat_token",
    ],
)  # fmt: skip
def test_the_names_users_give_secrets_are_secrets(name):
    assert secret_name(name)
    assert redact({name: SECRET}) == {name: MASK}


@pytest.mark.parametrize(
    "name",
    [
        "monkey", "keyboard", "tokenizer", "tokenizer_name", "num_keys", "keys", "max_tokens",
        "vocab_size", "pad_token", "eos_token", "sort_key", "primary_key", "password_file",
        "token_path", "author", "passage", "compass", "secretary_name", "key", "lr",
        "database_url", "db_url", "authority",
    ],
)  # fmt: skip
def test_names_that_only_contain_a_secret_word_are_not_secrets(name):
    assert not secret_name(name)
    assert redact({name: "plain value"}) == {name: "plain value"}


def test_numbers_are_never_secrets_whatever_their_name():
    params = {"max_tokens": 512, "token": 7, "api_key": 1.5, "secret": True, "auth": None}
    assert redact(params) == params


def test_secrets_are_masked_at_any_depth():
    value = {
        "db": {"password": SECRET, "host": "db.example.org", "port": 5432},
        "layers": [{"name": "a", "credentials": [SECRET, SECRET]}],
        "pair": ("x", {"hf_token": SECRET}),
        "deep": {"a": {"b": {"c": {"d": {"api_key": SECRET}}}}},
    }
    shown = redact(value)
    assert SECRET not in json.dumps(shown)
    assert shown["db"] == {"password": MASK, "host": "db.example.org", "port": 5432}
    assert shown["layers"][0]["credentials"] == [MASK, MASK]
    assert value["db"]["password"] == SECRET  # the value given is left as it is


def test_urls_and_dsns_lose_their_passwords_whatever_their_name():
    shown = redact(
        {
            "DATABASE_URL": "postgresql+psycopg://jt:pa/ss@db.example.org:5432/team",
            "db_url": "postgresql://jt:p@ss@db/team",
            "mirror": "https://h/d?api_key=k1&version=3",
            "conninfo": "host=db port=5432 password=hunter22 dbname=team",
            "header": "Authorization: Bearer abcdef123456",
            "note": f"use {TOKEN} to download",
        }
    )
    assert shown == {
        "DATABASE_URL": "postgresql+psycopg://jt:***@db.example.org:5432/team",
        "db_url": "postgresql://jt:***@db/team",
        "mirror": "https://h/d?api_key=***&version=3",
        "conninfo": "host=db port=5432 password=*** dbname=team",
        "header": "Authorization: Bearer ***",
        "note": "use *** to download",
    }


@pytest.mark.parametrize(
    "url, shown",
    [
        ("postgresql+psycopg://jt:pw@localhost/db", "postgresql+psycopg://jt:***@localhost/db"),
        ("postgresql://jt:pa/ss@localhost:5432/db", "postgresql://jt:***@localhost:5432/db"),
        ("postgresql://jt:a/b?c#d@localhost/db", "postgresql://jt:***@localhost/db"),
        ("https://registry:5000/v2/img@sha256:abc", "https://registry:5000/v2/img@sha256:abc"),
        ("https://host:8443/a/b@c", "https://host:8443/a/b@c"),
        ("https://h/x?monkey=1&keyboard=2", "https://h/x?monkey=1&keyboard=2"),
        ("https://h/x?key=AIzaXYZ&sessionid=42", "https://h/x?key=***&sessionid=***"),
    ],
)
def test_a_password_with_an_unencoded_slash_is_still_the_password(url, shown):
    assert redact_url(url) == shown
    assert redact_text(f"cannot reach {url} (refused)") == f"cannot reach {shown} (refused)"


def test_a_message_naming_a_psycopg_index_url_hides_its_password(tmp_path, monkeypatch):
    monkeypatch.setenv("JUPYTER_TRAINER_INDEX", "postgresql+psycopg://jt:pa/ss-S3CRET@db/team")
    with pytest.raises(Exception) as caught:
        workspace_settings(tmp_path)
    assert "S3CRET" not in str(caught.value) and "jt:***@db/team" in str(caught.value)


def test_objects_with_fields_show_their_fields_masked():
    @dataclasses.dataclass
    class Config:
        lr: float
        hub_token: str

    namespace = argparse.Namespace(hf_token=SECRET, lr=0.1, db=argparse.Namespace(pwd=SECRET))
    for value in (
        namespace,
        Config(0.1, SECRET),
        types.SimpleNamespace(password=SECRET),
        [{"cfg": Config(0.2, SECRET)}],
    ):
        assert SECRET not in repr(redact_object(value))
        assert SECRET not in frame_locals.describe(value)
    assert repr(redact_object(namespace)).startswith("Namespace(hf_token='***', lr=0.1")
    clean = argparse.Namespace(lr=0.1)
    assert redact_object(clean) is clean  # nothing to hide: its own repr is kept


def test_a_failing_frame_hides_secrets_inside_its_locals():
    namespace: dict = {}
    exec(
        "def failing(args, env, dsn_text):\n    raise KeyError('x')\n",
        namespace,
    )
    try:
        namespace["failing"](
            argparse.Namespace(hf_token=SECRET, lr=0.5),
            {"DATABASE_URL": f"postgresql://u:{SECRET}@h/db", "HOME": "/home/u"},
            f"host=h passphrase={SECRET}",
        )
    except KeyError as exc:
        (frame,) = frame_locals.failure_frames(exc, "<string>")
    assert SECRET not in json.dumps(frame)
    assert "lr=0.5" in frame["locals"]["args"] and "/home/u" in frame["locals"]["env"]


def test_hostile_nesting_and_cycles_never_raise():
    deep: dict = {}
    cursor = deep
    for _ in range(5000):
        cursor["a"] = {}
        cursor = cursor["a"]
    cursor["password"] = SECRET
    assert SECRET not in json.dumps(redact(deep))[:100_000]
    loop: list = []
    loop.append(loop)
    redact_object(loop)
    assert frame_locals.describe(loop)


def test_core_and_the_rank_side_use_one_function():
    assert core_redact.redact is rank_redact.redact
    assert core_redact.redact_text is rank_redact.redact_text


_names = st.sampled_from(["hf_token", "password", "db_pass", "api_key", "credentials", "auth"])
_secrets = st.text(string.ascii_letters + string.digits + "/@:+-_.", min_size=6, max_size=40)
_plain = st.one_of(st.integers(), st.floats(allow_nan=False), st.booleans(), st.none())


def _nested(leaf):
    return st.recursive(
        leaf,
        lambda inner: st.one_of(
            st.lists(inner, max_size=3),
            st.dictionaries(st.sampled_from(["a", "cfg", "layers", "lr"]), inner, max_size=3),
        ),
        max_leaves=10,
    )


@settings(max_examples=200, deadline=None)
@given(name=_names, secret=_secrets, around=_nested(_plain))
def test_a_secret_anywhere_in_a_structure_never_survives(name, secret, around):
    value = {"outer": [around, {"inner": {name: secret}}], name: {"x": secret}}
    shown = json.dumps(redact(value))
    assert secret not in shown


@settings(max_examples=200, deadline=None)
@given(value=_nested(_plain))
def test_values_without_secrets_come_back_equal(value):
    assert redact({"hyper": value, "max_tokens": value}) == {"hyper": value, "max_tokens": value}


def test_a_launch_forms_text_a_notebook_keeps_shows_no_secret(home):
    from jupyter_trainer.frontends.widgets.form import LaunchForm

    form = LaunchForm(
        "print(hf_token, lr)",
        {"hf_token": TOKEN, "lr": 0.1},
        {},
        history=[],
        origin={},
        submit=None,
    )
    assert TOKEN not in form.text() and "hf_token=" in form.text() and "lr=0.1" in form.text()


def test_a_wide_shared_object_graph_is_looked_into_once_and_within_a_budget():
    """A failing rank's local (an Accelerator, a model) can reach a graph whose objects are
    shared many times over: each object is looked into once, and at most MAX_OBJECTS of
    them, so the rank records its failure at once instead of walking 2**40 paths."""
    import time

    from jupyter_trainer.rankside.redaction import redact as rank_redact

    class Node:
        def __init__(self, child):
            self.left, self.right, self.api_token = child, child, "hf_" + "x" * 30

        def __repr__(self) -> str:
            return "Node(...)"

    node = None
    for _ in range(40):
        node = Node(node)
    started = time.monotonic()
    shown = rank_redact.redact_object(node, "accelerator")
    assert time.monotonic() - started < 5
    assert "api_token='***'" in repr(shown) and "hf_x" not in repr(shown)

    wide = [Node(None) for _ in range(rank_redact.MAX_OBJECTS * 2)]
    started = time.monotonic()
    rank_redact.redact_object(wide, "nodes")
    assert time.monotonic() - started < 10
