"""Mirrors of a run, after the fact: MLflow and TensorBoard."""
