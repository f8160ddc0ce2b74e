"""What the fake node knows of images: files an image adds to the host's filesystem, which the
kubelet mounts into a container of that image (read-only). Everything else a container sees
is the host's own.

``OPENMPI_SSH`` is what an image for the Kubeflow Trainer MPI runtime carries, as
mpioperator's images do: an sshd configuration for the node pods at
``/home/mpiuser/.sshd_config`` (port 2222, the host key and authorized keys from the SSH
Secret the Trainer mounts at ``/home/mpiuser/.ssh``) and an ssh client configuration for the
launcher (port 2222, that key, no host key checks). The fake runs every container as root
(the host's Python is not readable by another user), so both name the mounted files where
a non-root ``mpiuser`` would find them under its home."""

from __future__ import annotations

SSHD_CONFIG = """\
Port 2222
HostKey /home/mpiuser/.ssh/id_rsa
AuthorizedKeysFile /home/mpiuser/.ssh/authorized_keys
PidFile none
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
MaxSessions 50
MaxStartups 50
"""

SSH_CONFIG = """\
Host *
    Port 2222
    IdentityFile /home/mpiuser/.ssh/id_rsa
    IdentitiesOnly yes
    StrictHostKeyChecking no
    UserKnownHostsFile /dev/null
    LogLevel ERROR
    BatchMode yes
"""

OPENMPI_SSH = {"/home/mpiuser/.sshd_config": SSHD_CONFIG, "/etc/ssh/ssh_config": SSH_CONFIG}
