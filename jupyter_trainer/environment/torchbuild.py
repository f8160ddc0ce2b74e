"""The kernel's torch build, and the packages built against torch that must match it.

PyTorch publishes one build per accelerator and names it in the version's local label:
``2.13.0+cpu``, ``2.13.0+cu128``. PyPI holds only the default build (CUDA on Linux), and a
package compiled against torch (torchvision, torchaudio) works only with the build it was
compiled for: PyPI's ``torchvision 0.28.0`` (``+cu130`` inside) next to a ``2.13.0+cpu``
torch fails at ``import torchvision``. So an environment that layers on a kernel whose torch
carries a label, and keeps that torch, is resolved with the kernel's exact torch as a
constraint and the PyTorch index of that build (``https://download.pytorch.org/whl/cpu``,
or ``$JUPYTER_TRAINER_TORCH_INDEX``), where torchvision's matching build lives; and the
pre-flight check names any package whose build does not match the run's torch.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

INDEX_ENV = "JUPYTER_TRAINER_TORCH_INDEX"
DEFAULT_INDEX = "https://download.pytorch.org/whl/{variant}"
_NAME = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def split(version: str) -> tuple[str, str | None]:
    """``2.13.0+cpu`` -> ("2.13.0", "cpu"); no label -> (version, None)."""
    public, _, label = version.partition("+")
    return public, (label.lower() or None)


def variant_words(label: str | None) -> str:
    """What a build label means, for messages: ``cu130`` -> "CUDA 13.0 (cu130)"."""
    if label is None:
        return "no build label"
    cuda = re.fullmatch(r"cu(\d+)(\d)", label)
    if cuda:
        return f"CUDA {cuda.group(1)}.{cuda.group(2)} ({label})"
    if label == "cpu":
        return "the CPU only (cpu)"
    return label


def index_url(label: str) -> str:
    """The package index holding the torch builds labelled ``label`` (``{variant}`` in
    ``$JUPYTER_TRAINER_TORCH_INDEX`` is replaced by the label)."""
    template = os.environ.get(INDEX_ENV) or DEFAULT_INDEX
    return template.replace("{variant}", label)


def kept_torch(pip: Iterable[str], packages: Mapping[str, str]) -> str | None:
    """The kernel's torch version when it carries a build label and the requirements keep
    it (none names torch, or those that do accept this version); else None."""
    version = packages.get("torch")
    if not version or split(version)[1] is None:
        return None
    for line in pip:
        match = _NAME.match(line)
        if match is None or re.sub(r"[-_.]+", "-", match.group(1)).lower() != "torch":
            continue
        try:
            from packaging.requirements import Requirement
            from packaging.version import Version

            requirement = Requirement(line)
            if not requirement.specifier.contains(Version(version), prereleases=True):
                return None
        except Exception:  # a URL requirement or a form packaging does not read
            return None
    return version


def resolution(pip: Iterable[str], base: Mapping[str, Any] | None) -> dict[str, str] | None:
    """How a layered environment's requirements resolve torch: the kernel's exact version
    and the index of its build, or None when nothing needs it."""
    if base is None:
        return None
    version = kept_torch(pip, base.get("packages", {}))
    if version is None:
        return None
    label = split(version)[1] or ""
    return {"torch": version, "index": index_url(label), "label": label}


def build_mismatch(torch: str, module: str, version: str, needs: str | None) -> str | None:
    """Why the package ``module`` at ``version`` (requiring torch ``needs``) does not work
    with the run's ``torch``, or None when it does."""
    torch_public, torch_label = split(torch)
    label = split(version)[1]
    if needs and split(needs)[0] != torch_public:
        return f"{module} {version} was built for torch {needs}, and the run's torch is {torch}"
    if label and torch_label and label != torch_label:
        return (
            f"{module} {version} was built for torch {needs or torch_public} with "
            f"{variant_words(label)}, and the run's torch is {torch}, built for "
            f"{variant_words(torch_label)}"
        )
    return None


def matching_version(module: str, torch: str) -> str | None:
    """The release of ``module`` that goes with ``torch`` 2.x, where the rule is known:
    torchvision 0.(minor+15), torchaudio the same version as torch."""
    found = re.match(r"2\.(\d+)\.", split(torch)[0] + ".")
    if found is None:
        return None
    if module == "torchvision":
        return f"0.{int(found.group(1)) + 15}.*"
    if module == "torchaudio":
        return f"{split(torch)[0]}"
    return None
