"""Layer 7: a run's events mirrored elsewhere after the fact, read from the store:
TensorBoard event files and a TensorBoard over them (``tensorboard/``), and an MLflow
tracking server (``mlflow/``). The training loop never waits on them."""
