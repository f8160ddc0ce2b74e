"""Layer 2: the launcher table. ``table.py`` turns a LaunchSpec and a LaunchPlan into the
argv and environment of torchrun, mpirun, horovodrun or plain python (golden-tested, hostile
values included). Targets supply topology and transport; they never build a launcher's
command themselves."""
