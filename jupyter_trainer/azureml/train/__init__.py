"""``azureml.train``: the v1 estimators (``dnn``, ``estimator``) and HyperDrive."""
