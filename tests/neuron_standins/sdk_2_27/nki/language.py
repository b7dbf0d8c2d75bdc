"""Stand-in ``nki.language``: the simulator's standalone ``language``."""
from nki_kernels.simulator.standalone import language as _sim
from standin_log import mirror

mirror(__name__, _sim)
