"""The ssh target: nodes reached with the system OpenSSH client, one launcher per node.

``target.py`` is the target; ``commands.py`` its configuration and every command it sends,
as pure functions (golden-tested); ``prepare.py`` what it asks of nodes beyond the node
layer's pre-flight."""

from .target import SshTarget

__all__ = ["SshTarget"]
