"""The XLA:CPU custom-call target ``AwsNeuronCustomNativeKernel``, backed by the simulator.

On CPU the compiled program runs the very custom-call that Trainium would
get: XLA calls :func:`_target` with raw buffer pointers and the
``backend_config`` payload as the opaque string; we decode the payload, view
the input buffers as NumPy arrays (no copy), run the simulator and copy the
results into XLA's output buffers.

The target is a ``ctypes`` callback registered through the legacy custom-call
API (``api_version=0`` at registration, custom-call ``api_version=3``,
status-returning): that API hands the handler plain buffer pointers and the
``backend_config`` string as-is (the very string the Neuron compiler reads),
which a ctypes callback can take without a compiled shim; the typed FFI would
need a C handler and attributes instead of the opaque string.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import logging
import os
import math
import sys
import threading
import traceback

import jax
import ml_dtypes
import numpy as np

from nki_kernels import custom_call as cc
from nki_kernels.simulator.launch import simulate_into

log = logging.getLogger(__name__)

# void fn(void* out, void** ins, const char* opaque, size_t opaque_len, XlaCustomCallStatus* status)
_SIGNATURE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p),
                              ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p)

_lock = threading.Lock()
# XLA runs the custom-calls of a sharded CPU program on several threads at once. The simulator runs
# concurrent launches correctly, but its work is Python under the GIL: on a 16-core host an 8-device
# sharded training step took 1.2-1.4x longer with its shards' launches running at once than taking
# turns (scripts/bench_jax_sharded.py), so the CPU target lets them take turns unless
# NKI_OPS_CPU_CALLS_AT_ONCE=1.
_one_call_at_a_time = (contextlib.nullcontext() if os.environ.get("NKI_OPS_CPU_CALLS_AT_ONCE", "") == "1"
                       else threading.Lock())
_registered = False
_last_error: BaseException | None = None
_calls = 0


def _dtype(name: str) -> np.dtype:
    if name == "bfloat16":
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


_HUGE = 2 * 1024 * 1024
_MADV_HUGEPAGE = 14


@functools.lru_cache(maxsize=1)
def _madvise():
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.madvise
        fn.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
        return fn
    except (OSError, AttributeError):
        return None


def _advise_hugepages(arr: np.ndarray) -> None:
    """Ask Linux for transparent huge pages under a large result buffer before it is written.

    XLA allocates results without this hint; the first write to each 4 KiB page then
    faults, which made writing a 128 MiB result ~5x slower than into a NumPy array (NumPy
    gives the same hint for its own large allocations). Only a hint: errors are ignored."""
    if arr.nbytes < 2 * _HUGE or not sys.platform.startswith("linux"):
        return
    fn = _madvise()
    if fn is None:
        return
    start = -(-arr.ctypes.data // _HUGE) * _HUGE
    end = (arr.ctypes.data + arr.nbytes) // _HUGE * _HUGE
    if end > start:
        fn(start, end - start, _MADV_HUGEPAGE)


def _view(ptr: int, spec: dict, writeable: bool) -> np.ndarray:
    """A NumPy array over ``ptr`` (XLA's row-major buffer) with the payload's shape and dtype."""
    shape, dtype = tuple(spec["shape"]), _dtype(spec["dtype"])
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes == 0:
        return np.empty(shape, dtype)
    raw = (ctypes.c_char * nbytes).from_address(ptr)
    arr = np.frombuffer(raw, dtype=dtype).reshape(shape)
    arr.flags.writeable = writeable  # kernels must not scribble over XLA's operand buffers
    return arr


# --- kernels that cannot be found by name --------------------------------------------------------
# A payload names its kernel by module + qualname. A kernel defined inside a function (or in
# __main__, which a notebook may redefine) is not reliably found that way: two kernels from
# one factory share a name and source. Such kernels get a process-local instance number in
# the payload's static arguments, and the target runs exactly the kernel that was traced.

INSTANCE_KEY = "__nki_ops_instance__"
_instances: dict = {}
_instance_of: dict = {}


def instance_id(kernel) -> int | None:
    """A process-local number for a kernel not findable by module + qualname, else None."""
    func = kernel.func
    if "<locals>" not in func.__qualname__ and func.__module__ != "__main__":
        return None
    with _lock:
        n = _instance_of.get(id(kernel))
        if n is None or _instances.get(n) is not kernel:
            n = len(_instances) + 1
            _instances[n] = kernel  # kept alive: compiled executables may outlive the Python object
            _instance_of[id(kernel)] = n
        return n


def _run(payload: dict, inputs: list, outputs: list) -> list:
    instance = payload["static"].get(INSTANCE_KEY)
    if instance is None:
        return cc.run_payload(payload, inputs, outputs)
    kernel = _instances.get(instance)
    if kernel is None:
        raise ValueError(f"kernel {payload['kernel']['module']}.{payload['kernel']['qualname']} was defined in a "
                         "function of another process; only module-level kernels can be found from a payload")
    static = {k: v for k, v in payload["static"].items() if k != INSTANCE_KEY}
    out = simulate_into(outputs, kernel, tuple(payload["grid"]), *inputs, **static)
    return list(out) if isinstance(out, (tuple, list)) else [out]


def execute(payload: dict, out_ptr: int, in_ptrs) -> None:
    """Run one launch: inputs from ``in_ptrs``, results written through ``out_ptr``."""
    inputs = [_view(in_ptrs[i], s, False) for i, s in enumerate(payload["operands"])]
    specs = payload["results"]
    if len(specs) == 1:
        out_ptrs = [out_ptr]  # a single result is passed as its buffer, not as a tuple of pointers
    else:
        table = ctypes.cast(out_ptr, ctypes.POINTER(ctypes.c_void_p))
        out_ptrs = [table[i] for i in range(len(specs))]
    dsts = [_view(ptr, spec, True) for ptr, spec in zip(out_ptrs, specs)]
    for d in dsts:
        _advise_hugepages(d)
    # The kernel's outputs are allocated straight in XLA's result buffers where they match.
    results = [np.asarray(r) for r in _run(payload, inputs, dsts)]
    if len(results) != len(dsts):
        raise ValueError(f"kernel {payload['kernel']['qualname']} returned {len(results)} outputs, "
                         f"the custom-call declares {len(dsts)}")
    # A result living in another result's buffer must be read before that buffer is written.
    results = [r if r is d or not any(np.may_share_memory(r, o) for o in dsts) else np.array(r)
               for r, d in zip(results, dsts)]
    for dst, got in zip(dsts, results):
        if got.shape != dst.shape or got.dtype != dst.dtype:
            raise ValueError(f"kernel {payload['kernel']['qualname']} returned {got.shape} {got.dtype}, "
                             f"the custom-call declares {dst.shape} {dst.dtype}")
        if dst.size and got is not dst and not (got.ctypes.data == dst.ctypes.data and got.strides == dst.strides):
            np.copyto(dst, got)


def _target(out_ptr, in_ptrs, opaque, opaque_len, status):
    # An exception must never unwind into XLA's C++ frames: report it through the status.
    global _last_error, _calls
    _calls += 1
    try:
        payload = cc.decode_payload(ctypes.string_at(opaque, opaque_len))
        with _one_call_at_a_time:
            execute(payload, out_ptr, in_ptrs)
    except BaseException as exc:  # noqa: BLE001 - everything goes back to XLA as a failure
        _last_error = exc
        msg = f"{type(exc).__name__}: {exc}"
        log.debug("NKI custom-call failed:\n%s", "".join(traceback.format_exception(exc)))
        if not set_failure(status, msg):
            print(f"nki-ops: NKI custom-call failed and XLA cannot be told: {msg}", file=sys.stderr)


_CALLBACK = _SIGNATURE(_target)  # module-level so the trampoline outlives every executable


def calls() -> int:
    """How many times XLA has called the target in this process."""
    return _calls


def last_error() -> BaseException | None:
    """The Python exception behind the most recent failed custom-call (for debugging)."""
    return _last_error


# --- XlaCustomCallStatus -------------------------------------------------------------------
# XlaCustomCallStatusSetFailure is not exported by jaxlib, so we fill the status ourselves.
# It is `struct XlaCustomCallStatus_ { std::optional<std::string> message; }` and jaxlib links
# the system libstdc++ (new string ABI): {char* data; size_t size; union {char buf[16];
# size_t capacity;}} followed by the optional's `engaged` flag. Long messages are allocated
# with libstdc++'s own operator new, so the string's destructor frees them correctly.

def _libstdcxx():
    try:
        return ctypes.CDLL("libstdc++.so.6")
    except OSError:
        return None


def _abi_ok() -> bool:
    """True when jaxlib's std::string is libstdc++'s 32-byte new-ABI string (checked once)."""
    if not sys.platform.startswith("linux") or ctypes.sizeof(ctypes.c_void_p) != 8:
        return False
    try:
        with open("/proc/self/maps") as f:
            maps = f.read()
    except OSError:
        return False
    # jaxlib links the shared libstdc++; a libc++ build would lay std::string out differently.
    return "libstdc++.so.6" in maps and "libc++.so" not in maps


_STATUS_ABI = None


def set_failure(status: int, message: str) -> bool:
    """Mark an ``XlaCustomCallStatus*`` as failed with ``message``; False if that is not possible."""
    global _STATUS_ABI
    if not status:
        return False
    if _STATUS_ABI is None:
        _STATUS_ABI = _libstdcxx() if _abi_ok() else False
    if not _STATUS_ABI:
        return False
    data = message.encode("utf-8", "replace")[:4000]
    n = len(data)
    if n <= 15:
        buf = status + 16  # short-string buffer inside the std::string
    else:
        new = _STATUS_ABI._Znwm
        new.restype, new.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
        buf = new(n + 1)
        ctypes.c_size_t.from_address(status + 16).value = n  # capacity
    ctypes.memmove(buf, data, n)
    ctypes.c_char.from_address(buf + n).value = b"\0"
    ctypes.c_void_p.from_address(status).value = buf
    ctypes.c_size_t.from_address(status + 8).value = n
    ctypes.c_bool.from_address(status + 32).value = True
    return True


def register() -> None:
    """Register the target with XLA:CPU (idempotent)."""
    global _registered
    with _lock:
        if _registered:
            return
        capsule_new = ctypes.pythonapi.PyCapsule_New
        capsule_new.restype = ctypes.py_object
        capsule_new.argtypes = (ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)
        capsule = capsule_new(ctypes.cast(_CALLBACK, ctypes.c_void_p).value, b"xla._CUSTOM_CALL_TARGET", None)
        jax.ffi.register_ffi_target(cc.TARGET, capsule, platform="cpu", api_version=0)
        _registered = True
