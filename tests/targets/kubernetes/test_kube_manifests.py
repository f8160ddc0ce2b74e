"""The kubernetes target's names and manifests, without a cluster.

Every manifest is validated against the real schemas: the Kubeflow Trainer TrainJob CRD's
openAPIV3Schema (tests/support/kube_fake/schemas, made strict: a field the CRD does not know fails here
instead of being pruned by the API server) and the core batch/v1 Job, v1 Service and v1
ConfigMap schemas shipped by kubernetes-validate. Golden files hold the manifests of 1x1,
2x4 with GPUs (both APIs), mpirun on the Trainer's MPI runtime, and a run with hostile
names, parameters and arguments; regenerate them with JT_UPDATE_GOLDEN=1 after a
deliberate change. The cases and checks are in kube_manifest_cases.py; the settings, dry runs
and the pod program are tested in test_kube_offline.py.
"""

from __future__ import annotations

import base64
import json
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.kube_manifest_cases import (  # it skips these tests without kubernetes-validate and jsonschema
    CASES,
    GOLDEN,
    HOSTILE,
    IMAGE,
    K8S_VERSION,
    SHELLS,
    as_started,
    build,
    build_from,
    containers,
    jsonschema,
    kubernetes_validate,
    make_spec,
    normalised,
    strict,
    trainjob_schema,  # noqa: F401 (the fixture)
    validate,
)

from jupyter_trainer.targets.kubernetes.manifests import CONFIGMAP_LIMIT, to_yaml
from jupyter_trainer.targets.kubernetes.names import (
    RUN_ID_LABEL,
    dns_label,
    is_dns_label,
    is_label_value,
    label_value,
    object_name,
)


# -- a run's secrets -------------------------------------------------------------------
@pytest.mark.parametrize("case", ["job_1x1", "trainjob_2x4_gpu"])
def test_a_runs_secrets_go_in_a_secret_its_pods_mount_owner_only(case, trainjob_schema):
    token = "hf_" + "x" * 34
    spec = make_spec(params={"hf_token": token, "lr": 0.01})
    kept = json.dumps({"params": {"hf_token": token}, "variables": {}})
    _, config, run_id = CASES[case]
    docs = build_from(spec, config, run_id, secrets_json=kept)
    assert docs[0]["kind"] == "Secret", [d["kind"] for d in docs]
    assert base64.b64decode(docs[0]["data"]["secrets.json"]).decode() == kept
    assert docs[0]["metadata"]["name"] == object_name(run_id)
    for doc in docs:
        validate(doc, trainjob_schema)
        if doc["kind"] != "Secret":
            assert token not in json.dumps(doc), doc["kind"]
    volumes = [v for vs in _every(docs[-1], "volumes") for v in vs if "secret" in v]
    mounts = [m for ms in _every(docs[-1], "volumeMounts") for m in ms if "secrets" in m["name"]]
    assert volumes and mounts
    for volume in volumes:
        assert volume["secret"] == {"secretName": object_name(run_id), "defaultMode": 0o400}
    for mount in mounts:
        assert mount == {"name": volumes[0]["name"], "mountPath": "/jt/secrets", "readOnly": True}
    # without secrets there is no Secret and no such volume
    plain = build_from(make_spec(), config, run_id)
    assert "Secret" not in [d["kind"] for d in plain] and "jt-secrets" not in json.dumps(plain)


def _every(value, key):
    """Every value under ``key`` at any depth of ``value``."""
    if isinstance(value, dict):
        for k, v in value.items():
            if k == key:
                yield v
            yield from _every(v, key)
    elif isinstance(value, list):
        for v in value:
            yield from _every(v, key)


# -- golden files ----------------------------------------------------------------------
@pytest.mark.parametrize("case", sorted(CASES))
def test_manifests_match_golden(case):
    text = to_yaml(normalised(build(case)))
    golden = GOLDEN / f"{case}.yaml"
    if os.environ.get("JT_UPDATE_GOLDEN"):
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(text)
    assert text.splitlines() == golden.read_text().splitlines()


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_manifest_is_schema_valid(case, trainjob_schema):
    for doc in build(case):
        validate(doc, trainjob_schema)


def test_strict_schemas_catch_a_misspelt_field(trainjob_schema):
    """The validation above would fail on a typo (it is not a pass-everything schema)."""
    (cm, job) = build("trainjob_2x4_gpu")
    job["spec"]["trainer"]["numProcsPerNode"] = 4
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft202012Validator(strict(trainjob_schema)).validate(job)
    (cm, svc, indexed) = build("job_1x1")
    indexed["spec"]["template"]["spec"]["containers"][0]["comand"] = ["x"]
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(indexed, K8S_VERSION, strict=True)


def test_the_configmap_limit_is_under_a_mebibyte():
    assert CONFIGMAP_LIMIT < 1024 * 1024


# -- no shell, anywhere ----------------------------------------------------------------
@pytest.mark.parametrize("case", sorted(CASES))
def test_containers_run_argv_lists_without_a_shell(case):
    spec = CASES[case][0]
    for doc in build(case):
        for c in containers(doc):
            argv, _ = as_started(c)
            assert all(isinstance(a, str) for a in argv)
            assert not SHELLS & set(argv) and "-c" not in argv, argv
            for value in [*spec.code.args, *map(str, spec.params.values())]:
                # a user value is a whole argument, never part of a longer one
                assert not any(value in a and value != a for a in argv), (value, argv)


RUN_IDS = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}", fullmatch=True).filter(
    lambda r: ".." not in r
)
NAMES = st.text(
    st.characters(blacklist_categories=("Cc", "Cs", "Zl", "Zp", "Cn", "Co", "Cf")),
    min_size=1,
    max_size=100,
).filter(str.isprintable)


@settings(max_examples=25, deadline=None)
@given(
    run_id=RUN_IDS,
    name=NAMES,
    args=st.lists(st.text(max_size=40), max_size=4),
    value=st.text(max_size=60),
    api=st.sampled_from(["job", "trainjob"]),
    nodes=st.integers(1, 3),
)
def test_any_run_gives_valid_manifests_that_carry_its_values(
    run_id, name, args, value, api, nodes, trainjob_schema
):
    spec = make_spec(nodes=nodes, procs=2, name=name, params={"p": value}, args=args)
    config = {"api": api, "namespace": "ml", "image": IMAGE, "env": {"V": value}}
    for doc in build_from(spec, config, run_id):
        validate(doc, trainjob_schema)
        for c in containers(doc):
            argv, env = as_started(c)
            if args:
                assert argv[-len(args) :] == args
            assert env["V"] == value and env["JT_RUN_ID"] == run_id
        assert json.loads(doc["metadata"]["annotations"]["jupyter-trainer/params"]) == {"p": value}


def test_hostile_values_arrive_unchanged():
    spec, config, run_id = CASES["job_hostile"]
    (cm, svc, job) = build("job_hostile")
    argv, env = as_started(job["spec"]["template"]["spec"]["containers"][0])
    assert argv[-4:] == list(spec.code.args)
    assert env["WEIRD"] == config["env"]["WEIRD"] and env["JT_RUN_ID"] == run_id
    assert json.loads(job["metadata"]["annotations"]["jupyter-trainer/params"]) == spec.params
    assert job["metadata"]["annotations"][RUN_ID_LABEL] == run_id
    assert json.loads(cm["data"]["spec.json"])["params"] == spec.params


# -- names -----------------------------------------------------------------------------
@pytest.mark.parametrize("text", HOSTILE + ["digits-20261124-101500-abc123"])
def test_names_are_valid_and_distinct(text):
    assert is_dns_label(dns_label(text)) and is_label_value(label_value(text))
    name = object_name(text)
    assert is_dns_label(name) and len(name) <= 40
    assert is_dns_label(f"{name}-node-0-0-abcde") and is_dns_label(f"{name}-12-abcde")


def test_valid_names_are_kept_and_changed_ones_get_a_hash():
    assert dns_label("digits-1") == "digits-1"
    assert label_value("Run.1_x") == "Run.1_x"
    changed = dns_label("Digits 1")
    assert changed.startswith("digits-1-") and changed != dns_label("digits 1")
    assert label_value("x" * 64) != label_value("x" * 65)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=400))
def test_any_text_gives_valid_names(text):
    assert is_dns_label(dns_label(text))
    assert is_label_value(label_value(text))
    assert is_dns_label(object_name(text), 40)
    assert dns_label(text) == dns_label(text)


@settings(max_examples=200, deadline=None)
@given(st.text(min_size=1, max_size=80), st.text(min_size=1, max_size=80))
def test_different_texts_never_share_a_changed_name(a, b):
    if a != b and dns_label(a) != a and dns_label(b) != b:
        assert dns_label(a) != dns_label(b)
