"""``--dry-run`` on a kubernetes target: which API the run would use, and its manifests.

With ``api = "trainjob"`` or ``"job"`` the answer needs no cluster. With ``api = "auto"`` the
cluster is asked, as a real run asks it, and the note says what it serves and so what the run
would be. Where it cannot be asked (no kubeconfig, nothing listening, refused credentials),
the run is shown both ways, each preceded by a comment line that says when it applies: a
TrainJob where the cluster serves Kubeflow Trainer v2, else an Indexed Job with a headless
Service (less any way ``check_launch`` refuses, with its reason in the notes).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from ...core.errors import TargetError
from ...core.spec import RunSpec
from ...launchers.table import LaunchPlan
from .manifests import RunObjects, check_launch, first_node, launcher_command, manifests, to_yaml

WHAT = {"trainjob": "a Kubeflow Trainer TrainJob", "job": "an Indexed Job with a headless Service"}
WHEN = {
    "trainjob": "where the cluster serves Kubeflow Trainer v2 (TrainJob)",
    "job": "where it does not",
}


@dataclass(frozen=True)
class DryApis:
    """The APIs a dry run shows, first the one it plans with, and the notes that say why."""

    apis: tuple[str, ...]
    notes: tuple[str, ...]


def dry_apis(setting: str, served: Callable[[], str], spec: RunSpec) -> DryApis:
    """The API of the target's ``setting``; with ``auto``, the one the cluster serves (asked
    with ``served()``), or both where it cannot be asked. Raises as ``plan`` does when no
    API can run the launch."""
    if setting != "auto":
        return DryApis((setting,), ())
    try:
        api = served()
    except TargetError as exc:
        unknown = str(exc)
    else:
        serves = "serves" if api == "trainjob" else "does not serve"
        return DryApis(
            (api,),
            (
                f'api = "auto": the cluster {serves} Kubeflow Trainer\'s '
                f"TrainJob API, so the run is {WHAT[api]}",
            ),
        )
    apis, refused = [], []
    for api in ("trainjob", "job"):
        try:
            check_launch(spec, api)
            apis.append(api)
        except TargetError as why:
            refused.append(f"not {WHAT[api]}: {why}")
    if not apis:
        raise TargetError(refused[0])
    notes = [f'api = "auto" and the cluster could not be asked which API it serves ({unknown})']
    if len(apis) == 2:
        notes.append(
            "so the run is shown both ways: a TrainJob where the cluster serves "
            "Kubeflow Trainer v2, else an Indexed Job with a headless Service; apply "
            'only one, or set api = "trainjob" or "job" in the target to see one'
        )
    else:
        notes.append(f"so the run is {WHAT[apis[0]]}")
    return DryApis(tuple(apis), (*notes, *refused))


def dry_run_text(
    objects: RunObjects, spec: RunSpec, plan: LaunchPlan, apis: tuple[str, ...]
) -> str:
    """The manifests of each API in ``apis`` (``objects`` and ``plan`` are for the first),
    as one YAML stream; with two, each set preceded by a comment that says when it applies."""
    if len(apis) == 1:
        return to_yaml(manifests(objects))
    blocks = []
    for api in apis:
        if api != objects.api:
            other = replace(plan, master_addr=first_node(spec, objects.run_id, api))
            objects = replace(objects, api=api, command=launcher_command(spec, other, api))
        blocks.append(f"# {WHEN[api]}: {WHAT[api]}\n" + to_yaml(manifests(objects)))
    return "---\n".join(blocks)
