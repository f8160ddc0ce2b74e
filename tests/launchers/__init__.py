"""The launcher table: generated commands against golden files, backends, Horovod."""
