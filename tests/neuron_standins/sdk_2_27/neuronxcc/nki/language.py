"""Stand-in ``neuronxcc.nki.language``: the simulator's first-generation ``language``."""
from nki_kernels.simulator import language as _sim
from standin_log import mirror

mirror(__name__, _sim)
