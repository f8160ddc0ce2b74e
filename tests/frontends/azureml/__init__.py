"""Azure ML SDK v1 code and notebooks, run here, and ``azureml check``."""
