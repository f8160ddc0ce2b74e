"""The ssh target against real sshd on two hosts: commands, environments, launchers, hot
start, separate network namespaces (and ``jupyter-trainer check`` across them)."""
