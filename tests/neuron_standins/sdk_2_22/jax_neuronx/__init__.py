"""Stand-in ``jax_neuronx`` 0.1.3 with nki_call (SDK <= 2.22)."""
__version__ = "0.1.3"

def nki_call(kernel, *args, grid=(), out_shape=None, **static):
    """Record the call, then run the kernel's function on the simulator behind nki-ops' primitive."""
    from jax_ops.primitive import nki_call as simulated_call
    from standin_log import record, simulator_kernel

    func = getattr(kernel, "func", kernel)
    shapes = out_shape if isinstance(out_shape, (tuple, list)) else [out_shape]
    record("jax_neuronx.nki_call", func.__qualname__, grid, args, static,
           out_shape=[[list(s.shape), str(s.dtype)] for s in shapes if s is not None])
    return simulated_call(simulator_kernel(func), *args, grid=grid or None, out_shape=out_shape, **static)
