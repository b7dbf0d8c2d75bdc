"""The NeuronCore instructions, one implementation each, grouped by engine.

Every instruction here is written destination-style (``dst=``), as the current
``nki.isa`` reference documents it, with its operand rules (memories, engines,
dtypes, shapes, partition ranges) next to it. The two API generations are thin
front ends over these functions: the standalone ``nki.isa`` exports them as
they are; the first generation's functional ops (``neuronxcc.nki.isa``)
allocate a result tile and pass it as ``dst``.

Modules: :mod:`.operands` (destination and operand checks shared by all),
:mod:`.vector`, :mod:`.scalar`, :mod:`.gpsimd`, :mod:`.dma`, :mod:`.mx`,
:mod:`.rng`, :mod:`.registers`, :mod:`.control` (``nl.dynamic_range`` /
``fori_loop`` / ``while_loop``) and :mod:`.target` (``nc_version``).
"""
