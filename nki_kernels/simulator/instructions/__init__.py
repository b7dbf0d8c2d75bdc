"""The NeuronCore instructions, one implementation each, grouped by engine.

Every instruction here is written destination-style (``dst=``), as the current
``nki.isa`` reference documents it, with its operand rules (memories, engines,
dtypes, shapes, partition ranges) next to it. The two API generations are thin
front ends over these functions: the standalone ``nki.isa`` exports them as
they are; the first generation's functional ops (``neuronxcc.nki.isa``)
allocate a result tile and pass it as ``dst``.

Modules: :mod:`.operands` (destination and operand checks, operators, the
``@instruction`` marker), :mod:`.tensor` (Tensor engine), :mod:`.vector`,
:mod:`.scalar`, :mod:`.gpsimd`, :mod:`.dma`, :mod:`.mx` (OCP MX quantize and
matmul), :mod:`.rng` (XORWOW generators, dropout), :mod:`.registers` (virtual
registers and the ``reduce_cmd`` accumulation registers), :mod:`.control`
(``nl.dynamic_range`` / ``fori_loop`` / ``while_loop``) and :mod:`.target`
(``nc_version``, the simulated NeuronCore version, the config enums).
LNC instructions (``sendrecv``, ``core_barrier``) live in
:mod:`nki_kernels.simulator.cores`.
"""
