"""A fake Kubernetes API server at the process boundary, whose pods run as local processes.

What it is faithful to: the REST shapes lightkube uses (discovery, CRUD, merge/strategic/JSON
patch and server-side apply, label/field selectors, resourceVersion watches, pod log streams,
Status objects with 400/404/409/422); schema validation of created objects (Kubernetes 1.37
OpenAPI through kubernetes-validate, the Trainer CRDs' openAPIV3Schema) plus the name, label and
Job rules the real server checks in code; the Job controller (Indexed pods, hostnames, index
env/label/annotation, backoffLimit, podFailurePolicy, conditions); a Trainer v2 torch TrainJob
made into a headless Service plus an Indexed Job with the torch plugin's PET_* env and its
runtimePatches applied as the CRD's list types say (refused for a job or container the runtime
lacks); an MPI TrainJob (mpi.py) made into launcher and node jobs with the MPI plugin's SSH key
Secret, hostfile ConfigMap and OMPI_* env, its pods (``pod_network``) in network and PID
namespaces of their own so that the launcher's mpirun reaches the node pods' sshd; ownerReference
garbage collection with Orphan/Background/Foreground propagation; scheduling on requests against
one node's allocatable, with the default scheduler's FailedScheduling message; containers run
from their argv with their env, volumes, working directory, hostname and a cluster /etc/hosts in
their own mount and UTS namespaces; the API as pods reach it (incluster.py: TLS at
KUBERNETES_SERVICE_HOST:PORT, the service account's token, ca.crt and namespace mounted at
/var/run/secrets/kubernetes.io/serviceaccount, requests without a token it issued refused);
pod phases, container states, restarts, termination messages
and events.

What only a real cluster shows: images (containers run the host's files and Python, so the
command must exist here; an image's entrypoint is unknown; ``images`` can add files to one),
users (every container runs as root), network policies and Service IPs (without
``pod_network`` every pod shares the host's network and ports collide; with it pods have
addresses of their own but the host reaches none; a Service does not map port to targetPort;
DNS is /etc/hosts), resource limits and GPUs (requests only gate scheduling), admission webhooks and
CEL rules beyond those named above, unknown fields (refused here, as with fieldValidation=Strict;
a real server drops them with a warning by default), multiple nodes, preemption, RBAC (Roles and RoleBindings are stored, never
enforced; the kubeconfig's own client is not authenticated), the API from pods of a
``pod_network``,
the Job controller's real back-off delays, and JobSet itself.
"""

from .cluster import FakeCluster

__all__ = ["FakeCluster"]
