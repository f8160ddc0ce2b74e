"""The Kubernetes target: manifests without a cluster, and runs against the fake API server
(``support/kube_fake``), with Jobs, TrainJobs, Kueue, MPI, secrets and logs."""
