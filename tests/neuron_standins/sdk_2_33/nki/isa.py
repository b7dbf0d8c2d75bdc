"""Stand-in ``nki.isa``: the simulator's standalone ``isa``."""
from nki_kernels.simulator.standalone import isa as _sim
from standin_log import mirror

mirror(__name__, _sim)
