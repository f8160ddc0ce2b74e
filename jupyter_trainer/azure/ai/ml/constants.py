"""``azure.ai.ml.constants``: the asset types and modes v2's samples name."""

from __future__ import annotations


class AssetTypes:
    URI_FILE = "uri_file"
    URI_FOLDER = "uri_folder"
    MLTABLE = "mltable"
    CUSTOM_MODEL = "custom_model"
    MLFLOW_MODEL = "mlflow_model"
    TRITON_MODEL = "triton_model"


class InputOutputModes:
    RO_MOUNT = "ro_mount"
    RW_MOUNT = "rw_mount"
    DOWNLOAD = "download"
    UPLOAD = "upload"
    DIRECT = "direct"
    EVAL_MOUNT = "eval_mount"
    EVAL_DOWNLOAD = "eval_download"


class DistributionType:
    PYTORCH = "pytorch"
    MPI = "mpi"
    TENSORFLOW = "tensorflow"


__all__ = ["AssetTypes", "DistributionType", "InputOutputModes"]
