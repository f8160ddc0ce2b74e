"""What a rank observes about itself and its node while it runs: the hardware's figures
(``system.py``), the GPUs read without a CUDA context (``gpu_read.py``), and the witness of
its death and of the failures around it (``death_watch.py``).
"""
