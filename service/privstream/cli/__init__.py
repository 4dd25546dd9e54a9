"""The ``privstream`` commands.

Each command sanitizes on one thread, so BLAS gets one thread too, set here
before numpy loads: OpenBLAS otherwise keeps a worker thread per core
spinning after each matrix product (the start-up's calibrations make a few),
which took about 0.1 s of CPU from every ``sanitize`` run and, in a worker,
a core from the broker beside it. A value already in the environment wins.
"""

import os

for _variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")
