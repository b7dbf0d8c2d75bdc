"""Stand-in ``neuronxcc.nki.isa``: the simulator's first-generation ``isa``."""
from nki_kernels.simulator import isa as _sim
from standin_log import mirror

mirror(__name__, _sim)
