"""The model registry's REST API on a real in-process jupyter_server, unauthenticated access
disallowed: the list of models, one model with every version and its lineage, deleting
versions (the server user's own only), an unknown model 404 and a malformed name or
version 400, for versions registered from real runs."""

from __future__ import annotations

import json

import pytest
from support.made_runs import forge
from support.server_rest import BASE, expect_error, get_json, jp_server_config  # noqa: F401
from tornado.httpclient import HTTPClientError

import jupyter_trainer as jt
from jupyter_trainer.api import runs as api
from jupyter_trainer.store import Store

pytest_plugins = ["pytest_jupyter.jupyter_server"]

TRAIN = """
from jupyter_trainer import runtime as jt
for step in range(3):
    jt.log(step=step, loss=lr / (step + 1))
(jt.outputs_dir / "model.pt").write_bytes(str(lr).encode() * 100)
(jt.outputs_dir / "tok").mkdir()
(jt.outputs_dir / "tok" / "vocab.txt").write_text("a\\nb\\n")
"""


def train(lr: float, name: str) -> api.Run:
    return api.submit(
        TRAIN, launcher="python", name=name, params={"lr": lr}, namespace={"lr": lr}, wait=True
    )


@pytest.fixture
def registered(home) -> dict:
    """digits@1 from one run, digits@2 from another, tok@1 (a folder) from the first."""
    first, second = train(0.5, "first"), train(0.25, "second")
    return {
        "first": first,
        "second": second,
        "digits1": first.register_model("digits", "model.pt", tags={"stage": "dev"}),
        "digits2": second.register_model("digits", "model.pt", tags={"stage": "prod"}),
        "tok1": first.register_model("tok", "tok"),
    }


ENDPOINTS = [("models",), ("models", "digits"), ("models", "digits", "1")]


def server_config(allow_unauthenticated_access: bool) -> dict:
    return {
        "ServerApp": {
            "jpserver_extensions": {"jupyter_trainer": True},
            "allow_unauthenticated_access": allow_unauthenticated_access,
        }
    }


# With unauthenticated access allowed by the server, only @web.authenticated refuses.
@pytest.mark.parametrize(
    "jp_server_config",
    [server_config(False), server_config(True)],
    ids=["server-refuses", "handler-refuses"],
)
@pytest.mark.parametrize("parts", ENDPOINTS)
async def test_every_model_endpoint_requires_auth(jp_fetch, registered, parts):
    with pytest.raises(HTTPClientError) as info:
        await jp_fetch(BASE, *parts, headers={"Authorization": ""})
    assert info.value.code in (401, 403)
    assert (await jp_fetch(BASE, *parts)).code == 200
    if len(parts) > 1:
        with pytest.raises(HTTPClientError) as info:
            await jp_fetch(
                BASE, *parts, method="DELETE", headers={"Authorization": ""}, params={"all": "1"}
            )
        assert info.value.code in (401, 403)
        assert [m.version for m in jt.models("digits")] == [2, 1]


async def test_list_the_models(jp_fetch, registered):
    first, second = registered["first"], registered["second"]
    digits2, tok1 = registered["digits2"], registered["tok1"]
    page = await get_json(jp_fetch, "models")
    assert page == {
        "models": [
            {
                "name": "digits",
                "versions": 2,
                "latest": 2,
                "created": digits2.lineage["created"],
                "run_id": second.id,
                "path": "model.pt",
                "files": 1,
                "bytes": 400,
                "tags": {"stage": "prod"},
                "run_exists": True,
            },
            {
                "name": "tok",
                "versions": 1,
                "latest": 1,
                "created": tok1.lineage["created"],
                "run_id": first.id,
                "path": "tok",
                "files": 1,
                "bytes": 4,
                "tags": {},
                "run_exists": True,
            },
        ]
    }


async def test_show_a_model_with_every_version_and_its_lineage(jp_fetch, registered, home):
    first, second = registered["first"], registered["second"]
    shown = await get_json(jp_fetch, "models", "digits")
    assert shown["name"] == "digits"
    assert [
        (v["version"], v["run_id"], v["tags"], v["bytes"], v["run_exists"])
        for v in shown["versions"]
    ] == [(2, second.id, {"stage": "prod"}, 400, True), (1, first.id, {"stage": "dev"}, 300, True)]
    for version in shown["versions"]:
        model = jt.get_model("digits", version["version"])
        assert version["lineage"] == json.loads((model.folder / "lineage.json").read_text())
        assert version["created"] == model.lineage["created"]
    assert shown["versions"][1]["lineage"]["params"] == {"lr": 0.5}
    assert shown["versions"][1]["lineage"]["run_name"] == "first"

    # a version outlives its run, and says its run is gone
    Store(home).delete(first.id)
    shown = await get_json(jp_fetch, "models", "digits")
    assert [(v["version"], v["run_exists"]) for v in shown["versions"]] == [(2, True), (1, False)]
    rows = {m["name"]: m for m in (await get_json(jp_fetch, "models"))["models"]}
    assert (rows["digits"]["run_exists"], rows["tok"]["run_exists"]) == (True, False)


async def test_no_models_yet(jp_fetch, home):
    assert await get_json(jp_fetch, "models") == {"models": []}
    assert not (home / "models.db").exists() and not (home / "models").exists()


async def test_an_unknown_model_is_404(jp_fetch, registered):
    error = await expect_error(jp_fetch, 404, "models", "nope")
    assert error["type"] == "ModelNotFound"
    assert "no model 'nope'" in error["error"] and "digits, tok" in error["error"]


@pytest.mark.parametrize(
    "bad", [".hidden", "a%20b", "x" * 200, "-dash", "a..b", "a%2Fb", "..%2Fruns", "a%00b"]
)
async def test_a_malformed_model_name_is_400(jp_fetch, registered, bad):
    error = await expect_error(jp_fetch, 400, "models", bad)
    assert error["error"].startswith("invalid model name ") and error["type"] == "SpecError"
    assert "a model name is 1-128 letters, digits" in error["error"]


@pytest.mark.parametrize("bad", ["..", "..%2F..%2Fetc", "%2Fetc%2Fpasswd", "..%2Fmodels.db"])
async def test_traversal_in_a_model_name_is_refused(jp_fetch, home, bad):
    (home / "models").mkdir(parents=True)
    (home / "secret").mkdir()
    (home / "secret" / "lineage.json").write_text("{}")
    with pytest.raises(HTTPClientError) as info:
        await jp_fetch(BASE, "models", bad)
    assert info.value.code in (400, 404)


async def test_unknown_routes_list_the_model_routes(jp_fetch, home):
    error = await expect_error(jp_fetch, 404, "models", "x", "y", "z")
    assert "models/MODEL/VERSION" in error["error"]
    error = await expect_error(jp_fetch, 404, "models", "x", "y", "z", method="DELETE")
    assert "models/MODEL/VERSION" in error["error"]


async def test_delete_a_version_then_every_version(jp_fetch, registered, home):
    done = await jp_fetch(BASE, "models", "digits", "1", method="DELETE")
    assert json.loads(done.body) == {"name": "digits", "deleted": [1]}
    assert [m.version for m in jt.models("digits")] == [2]
    assert [v["version"] for v in (await get_json(jp_fetch, "models", "digits"))["versions"]] == [2]
    error = await expect_error(jp_fetch, 404, "models", "digits", "1")
    assert "it was deleted" in error["error"]
    error = await expect_error(jp_fetch, 400, "models", "digits", method="DELETE")
    assert "only with ?all=1" in error["error"]
    done = await jp_fetch(BASE, "models", "digits", method="DELETE", params={"all": "1"})
    assert json.loads(done.body) == {"name": "digits", "deleted": [2]}
    assert [m["name"] for m in (await get_json(jp_fetch, "models"))["models"]] == ["tok"]
    assert registered["first"].outputs.joinpath("model.pt").is_file()  # runs are untouched


async def test_one_version_and_a_damaged_one(jp_fetch, registered):
    shown = await get_json(jp_fetch, "models", "digits", "2")
    assert shown["name"] == "digits" and shown["version"] == 2
    assert shown["lineage"] == registered["digits2"].lineage
    forge(registered["digits1"], [{"path": "../../escape", "size": 1, "sha256": "0" * 64}])
    versions = (await get_json(jp_fetch, "models", "digits"))["versions"]
    assert versions[0]["lineage"]["params"] == {"lr": 0.25} and "damaged" not in versions[0]
    assert versions[1]["lineage"] == {} and "file path '../../escape'" in versions[1]["damaged"]


async def test_another_users_version_is_403(jp_fetch, registered):
    digits2 = registered["digits2"]
    someone = {"user": "someone-else", "uid": 4242, "hub_user": None}
    forge(digits2, digits2.lineage["files"], user="someone-else", owner=someone)
    for parts, params in ((("models", "digits", "2"), {}), (("models", "digits"), {"all": "1"})):
        error = await expect_error(jp_fetch, 403, *parts, method="DELETE", params=params)
        assert error["type"] == "NotOwner" and "digits@2 by someone-else" in error["error"]
    assert [m.version for m in jt.models("digits")] == [2, 1]


@pytest.mark.parametrize(
    "parts, code, message",
    [
        (("models", "digits", "0"), 400, "invalid model version '0'"),
        (("models", "digits", "latest"), 400, "give the number of the version"),
        (("models", "digits", "1%2F..%2F.."), 400, "invalid model version"),
        (("models", "digits", "9"), 404, "has no version 9"),
        (("models", "..", "1"), 400, "invalid model name"),
        (("models", "nope", "1"), 404, "no model 'nope'"),
    ],
)
async def test_bad_deletes_are_refused(jp_fetch, registered, parts, code, message):
    error = await expect_error(jp_fetch, code, *parts, method="DELETE")
    assert message in error["error"]
    assert [m.version for m in jt.models("digits")] == [2, 1]
