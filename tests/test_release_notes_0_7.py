"""Items of the NKI 0.7.0 release (Neuron 2.33.0) against the simulator, each checked with a small
current-API kernel against an independent reference (NumPy / Python integer math, or the documented
error), a refused case for every rule and an allowed edge case beside it:

* specialization by tracing: ``for i in nl.dynamic_range(...)`` and ``while reg:`` (deprecated in 0.6.0)
  are removed from the default specialization; ``NKI_COMPILER_FRONTEND=custom`` keeps them, deprecated
  (release notes, "Announcing changes to NKI specialization", "Migrating from NKI 0.6.0 to NKI 0.7.0");
  first-generation (``neuronxcc.nki``) kernels are not NKI 0.7 and keep their behaviour;
* ``nki.isa.NkiScalar`` with ``nisa.scalar_load`` / ``scalar_store`` (NkiScalar, scalar_load /
  scalar_store pages, "NKI Scalar Values"), the iteration value of ``nl.fori_loop`` (its 2.33.0 page:
  "i is a NkiScalar unless either lower or upper is a VirtualRegister") and a 32-bit bound;
* the kernel / compiler LNC degree check (migration guide; compiler error NCC_EVRF066);
* the prepare / trigger split of ``all_to_all_v`` / ``all_gather_v`` (their nki.collectives pages).
"""

import warnings

import numpy as np
import pytest

from nki_kernels.simulator import NKIError, install
from nki_kernels.simulator import config as sim_config
from nki_kernels.simulator.config import NKIWarning
from tests.isa_helpers import to_hbm, to_sbuf
from tests.test_current_api_conversions import counted

install()
import nki  # noqa: E402
import nki.isa as nisa  # noqa: E402
import nki.language as nl  # noqa: E402

ENV = "NKI_COMPILER_FRONTEND"


@pytest.fixture(autouse=True)
def _default_frontend(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)


def _i32(v):
    """Two's-complement wrap to 32 bits (the independent reference of NkiScalar's int32 arithmetic)."""
    return (v + 2 ** 31) % 2 ** 32 - 2 ** 31


# --------------------------------------------------------------------------------------------------------
# 1. Specialization by tracing: the dynamic loop constructs deprecated in 0.6.0 are removed
# --------------------------------------------------------------------------------------------------------
# (the kernel counting to 3 with each loop form: tests/test_current_api_conversions.py's)
_loops = counted


@pytest.mark.parametrize("form,replacement", [("dynamic_range", r"nl\.fori_loop"),
                                              ("while reg", r"nl\.while_loop")])
def test_removed_dynamic_loops_warn_by_default_and_run_as_before(form, replacement):
    # the `removed` diagnostic warns by default (kernels written for NKI <= 0.6, nki-library's among
    # them, keep running), naming the replacement and NKI 0.7.0's refusal
    x = np.zeros((1, 4), np.float32)
    with pytest.warns(NKIWarning, match=rf"\[removed\].*removed in NKI 0\.7\.0.*refuses the kernel.*use "
                                        rf"{replacement}.*{ENV}=custom"):
        got = _loops(x, form)
    np.testing.assert_array_equal(got, x + 3)


@pytest.mark.parametrize("form,replacement", [("dynamic_range", r"nl\.fori_loop"),
                                              ("while reg", r"nl\.while_loop")])
def test_removed_dynamic_loops_are_refused_as_0_7_does_on_request(form, replacement):
    with sim_config.override(removed="error"):
        with pytest.raises(NKIError, match=rf"\[removed\].*removed in NKI 0\.7\.0.*use {replacement}.*"
                                           rf"{ENV}=custom"):
            _loops(np.zeros((1, 4), np.float32), form)


@pytest.mark.parametrize("form", ["fori_loop", "while_loop"])
def test_replacements_run_by_default_without_warning(form):
    x = np.zeros((1, 4), np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        np.testing.assert_array_equal(_loops(x, form), x + 3)


@pytest.mark.parametrize("value", ["custom", " Custom "])
@pytest.mark.parametrize("form", ["dynamic_range", "while reg"])
def test_custom_frontend_keeps_the_previous_specialization_deprecated(form, value, monkeypatch):
    monkeypatch.setenv(ENV, value)
    x = np.zeros((1, 4), np.float32)
    with pytest.warns(DeprecationWarning, match=rf"deprecated.*{ENV}=custom.*deprecated in Neuron 2\.33\.0") as rec:
        got = _loops(x, form)
    np.testing.assert_array_equal(got, x + 3)
    assert all(w.filename == counted.func.__code__.co_filename for w in rec if issubclass(w.category, DeprecationWarning))


def test_frontend_is_read_per_launch(monkeypatch):
    x = np.zeros((1, 4), np.float32)
    monkeypatch.setenv(ENV, "custom")
    with pytest.warns(DeprecationWarning):
        np.testing.assert_array_equal(_loops(x, "dynamic_range"), x + 3)
    monkeypatch.setenv(ENV, "tracing")  # (any other value is the default specialization)
    with sim_config.override(removed="error"), pytest.raises(NKIError, match=r"\[removed\]"):
        _loops(x, "dynamic_range")


def test_first_generation_kernels_keep_their_dynamic_range():
    from nki_kernels.simulator import language as gen1_nl
    from nki_kernels.simulator import nki as gen1_nki

    @gen1_nki.jit
    def k(x):
        out = gen1_nl.ndarray(x.shape, x.dtype, buffer=gen1_nl.shared_hbm)
        t = gen1_nl.load(x)
        for _ in gen1_nl.dynamic_range(2):
            t = gen1_nl.add(t, 1.0)
        gen1_nl.store(out, t)
        return out

    x = np.zeros((1, 4), np.float32)
    with pytest.warns(DeprecationWarning, match="deprecated"):  # (0.6.0's warning; no 0.7 error)
        np.testing.assert_array_equal(k(x), x + 2)


# --------------------------------------------------------------------------------------------------------
# 2. NkiScalar, scalar_load / scalar_store
# --------------------------------------------------------------------------------------------------------
def _scalar_kernel(expr, dtype=np.int32, out_dtype=None):
    @nki.jit
    def k(v):
        s = nisa.scalar_load(to_sbuf(v))
        r = expr(s)
        o = nl.ndarray((1, 1), out_dtype or dtype, buffer=nl.sbuf)
        nisa.scalar_store(o, r)
        return to_hbm(o)

    return k


@pytest.mark.parametrize("v,expr,ref", [
    (5, lambda i: i * 4 + 1, lambda v: v * 4 + 1),                    # the NKI Scalar Values example
    (100000, lambda i: i * 100000, lambda v: _i32(v * 100000)),       # "100000 * 100000 yields 1410065408"
    (2 ** 31 - 1, lambda i: i + 1, lambda v: _i32(v + 1)),            # "adding 1 to the largest nl.int32 ..."
    (7, lambda i: 10 - i, lambda v: 10 - v),                          # reflected
    (7, lambda i: -i * 3 - (i - 2), lambda v: -v * 3 - (v - 2)),
])
def test_int32_scalar_arithmetic_wraps(v, expr, ref):
    got = _scalar_kernel(expr)(np.array([[v]], np.int32))
    assert got.dtype == np.int32 and int(got[0, 0]) == ref(v)
    assert ref(100000) == 1410065408 or v != 100000


def test_int64_scalar_keeps_its_width_from_hbm():
    @nki.jit
    def k(v):
        s = nisa.scalar_load(v)  # (a 1x1 HBM tensor)
        o = nl.ndarray((1, 1), nl.int64, buffer=nl.shared_hbm)
        nisa.scalar_store(o, s * 3 + 1)
        return o

    v = 2 ** 40 + 7
    got = k(np.array([[v]], np.int64))
    assert got.dtype == np.int64 and int(got[0, 0]) == 3 * v + 1


@pytest.mark.parametrize("dtype,shape,match", [
    (np.uint32, (1, 1), "unsigned dtypes are not accepted"),
    (np.float32, (1, 1), "nl.int32 or nl.int64"),
    (np.int32, (1, 2), "must be a 1x1 tensor"),
])
def test_scalar_load_refuses(dtype, shape, match):
    @nki.jit
    def k(v):
        nisa.scalar_load(to_sbuf(v))
        return v

    with pytest.raises(NKIError, match=match):
        k(np.zeros(shape, dtype))


def test_scalar_store_refuses_a_python_int_and_another_width():
    @nki.jit
    def k(v, case):
        s = nisa.scalar_load(to_sbuf(v))
        o = nl.ndarray((1, 1), nl.int64 if case == "width" else nl.int32, buffer=nl.sbuf)
        nisa.scalar_store(o, 3 if case == "int" else s)
        return to_hbm(o)

    with pytest.raises(NKIError, match="value must be an NkiScalar"):
        k(np.zeros((1, 1), np.int32), "int")
    with pytest.raises(NKIError, match="same width as value"):
        k(np.zeros((1, 1), np.int32), "width")
    assert int(k(np.full((1, 1), 9, np.int32), "ok")[0, 0]) == 9  # (edge: same width)


@pytest.mark.parametrize("expr,match", [
    (lambda a, b: a + b, "dtypes must match"),                   # int32 + int64
    (lambda a, b: b < 3, "int64 scalars are rejected"),          # 64-bit comparison
    (lambda a, b: (a < 3) + 1, "result cannot be used"),          # 32-bit comparison: traced, unusable
    (lambda a, b: bool(a), "cannot decide a Python if"),
    (lambda a, b: int(a), "no Python value"),
])
def test_scalar_operations_refused(expr, match):
    @nki.jit
    def k(v32, v64):
        expr(nisa.scalar_load(to_sbuf(v32)), nisa.scalar_load(to_sbuf(v64)))
        return v32

    with pytest.raises(NKIError, match=match):
        k(np.ones((1, 1), np.int32), np.ones((1, 1), np.int64))


def test_int32_comparison_is_traced():
    @nki.jit
    def k(v):
        c = nisa.scalar_load(to_sbuf(v)) < 3  # (edge: allowed at 32 bits, only its use is refused)
        assert isinstance(c, nisa.NkiScalar)
        return v

    k(np.ones((1, 1), np.int32))


@pytest.mark.parametrize("api", ["scalar_load", "scalar_store"])
def test_scalars_need_the_tracer_frontend(api, monkeypatch):
    @nki.jit
    def k(v):
        t = to_sbuf(v)
        if api == "scalar_load":
            nisa.scalar_load(t)
        else:
            nisa.scalar_store(t, nisa.NkiScalar(1, nl.int32))
        return v

    monkeypatch.setenv(ENV, "custom")
    with pytest.raises(NKIError, match="parser frontend"):
        k(np.ones((1, 1), np.int32))
    monkeypatch.delenv(ENV)
    k(np.ones((1, 1), np.int32))  # (edge: the default tracer accepts it)


# -- fori_loop: NkiScalar iteration value, NkiScalar / 32-bit bounds, scalar_offset -----------------------
def _gather_rows(x, lower, upper, kind):
    """out[j] = x[j] for j in [lower, upper): the row is addressed by the loop's i as a scalar_offset."""

    @nki.jit
    def k(x, b):
        R, F = x.shape
        out = nl.ndarray((R, F), x.dtype, buffer=nl.shared_hbm)
        zero = nl.zeros((R, F), x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=out, src=zero)
        bt = to_sbuf(b)
        if kind == "scalar":
            lo, hi = nisa.scalar_load(bt[0:1, 0:1]), nisa.scalar_load(bt[0:1, 1:2]) - 0
        elif kind == "register":
            lo, hi = lower, nisa.register_alloc()
            nisa.register_load(hi, bt[0:1, 1:2])
        else:
            lo, hi = lower, upper
        kinds = []

        def body(i):
            kinds.append(type(i).__name__)
            row = nl.ndarray((1, F), x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=row, src=x.ap([[F, 1], [1, F]], scalar_offset=i))
            nisa.dma_copy(dst=out.ap([[F, 1], [1, F]], scalar_offset=i), src=row)

        nl.fori_loop(lo, hi, body)
        k.kinds = kinds
        return out

    got = k(x, np.array([[lower, upper]], np.int32))
    return got, set(k.kinds)


@pytest.mark.parametrize("kind,want", [("int", {"NkiScalar"}), ("scalar", {"NkiScalar"}),
                                       ("register", {"VirtualRegister"})])
def test_fori_loop_body_value_and_bounds(kind, want):
    x = np.arange(24, dtype=np.float32).reshape(6, 4)
    got, kinds = _gather_rows(x, 1, 5, kind)
    ref = np.zeros_like(x)
    ref[1:5] = x[1:5]
    np.testing.assert_array_equal(got, ref)
    assert kinds == want


def test_fori_loop_refuses_an_int64_bound_and_takes_an_int32_expression():
    @nki.jit
    def k(v, wide):
        s = nisa.scalar_load(to_sbuf(v))
        acc = nl.zeros((1, 1), nl.float32, buffer=nl.sbuf)

        def body(i):
            nisa.tensor_scalar(dst=acc, data=acc, op0=nl.add, operand0=1.0)

        nl.fori_loop(0, s * 2 + 1, body)  # "Supported, including an arithmetic expression" (int32)
        return to_hbm(acc)

    assert k(np.full((1, 1), 3, np.int32), False)[0, 0] == 7.0
    with pytest.raises(NKIError, match="int64 NkiScalar cannot bound nl.fori_loop"):
        k(np.full((1, 1), 3, np.int64), True)


@pytest.mark.parametrize("buffer,dtype,ok", [("sbuf", np.int64, False), ("sbuf", np.int32, True),
                                             ("hbm", np.int64, True)])
def test_int64_scalar_offset_only_on_hbm(buffer, dtype, ok):
    @nki.jit
    def k(x, v):
        s = nisa.scalar_load(to_sbuf(v))
        src = to_sbuf(x) if buffer == "sbuf" else x
        row = nl.ndarray((1, 4), x.dtype, buffer=nl.sbuf)
        if buffer == "sbuf":  # the offset moves along the free axis of one partition
            nisa.tensor_copy(dst=row, src=src.ap([[8, 1], [1, 4]], scalar_offset=s, indirect_dim=1))
        else:
            nisa.dma_copy(dst=row, src=src.ap([[4, 1], [1, 4]], scalar_offset=s))
        return to_hbm(row)

    x = np.arange(8, dtype=np.float32).reshape(1, 8) if buffer == "sbuf" else \
        np.arange(12, dtype=np.float32).reshape(3, 4)
    v = np.full((1, 1), 1, dtype)
    if not ok:
        with pytest.raises(NKIError, match="cannot be the scalar_offset of an SBUF or PSUM"):
            k(x, v)
        return
    want = x[0, 1:5] if buffer == "sbuf" else x[1]
    np.testing.assert_array_equal(k(x, v)[0], want)


def test_fori_loop_under_custom_frontend_passes_an_int(monkeypatch):
    monkeypatch.setenv(ENV, "custom")
    seen = []

    @nki.jit
    def k(x):
        nl.fori_loop(0, 3, lambda i: seen.append(i))
        return x

    k(np.zeros((1, 1), np.float32))
    assert seen == [0, 1, 2] and all(type(i) is int for i in seen)


# --------------------------------------------------------------------------------------------------------
# 4. prepare / trigger splits of the variable-length collectives
# --------------------------------------------------------------------------------------------------------
from nki_kernels.simulator import collectives as cc  # noqa: E402
from nki_kernels.simulator.ranks import simulate_ranks  # noqa: E402

_RNG = np.random.default_rng(733)


def _hbm_copy(x, value=None):
    """A kernel-local HBM tensor shaped like 2-D ``x``: a copy of it, or filled with ``value``."""
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.hbm)
    s = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    if value is None:
        nisa.dma_copy(dst=s, src=x)
    else:
        nisa.memset(dst=s, value=value)
    nisa.dma_copy(dst=t, src=s)
    return t


@nki.jit
def _split_k(x, meta, op="a2a", out_elems=0, case="ok"):
    out = nl.ndarray((1, out_elems), dtype=x.dtype, buffer=nl.shared_hbm)
    fill = nl.ndarray((1, out_elems), dtype=x.dtype, buffer=nl.sbuf)
    nisa.memset(dst=fill, value=-1.0)
    nisa.dma_copy(dst=out, src=fill)
    src = _hbm_copy(x, value=0.0)          # srcs not filled yet: prepare does not read them
    m = _hbm_copy(meta)
    rg = cc.ReplicaGroup([[0, 1]])
    prep, trig = ((cc.all_to_all_v_prepare, cc.all_to_all_v_trigger) if op == "a2a" else
                  (cc.all_gather_v_prepare, cc.all_gather_v_trigger))
    p = prep(srcs=[src], dsts=[out], replica_group=rg, metadata_tensor=m)
    zero = nl.ndarray(meta.shape, dtype=meta.dtype, buffer=nl.sbuf)
    nisa.memset(dst=zero, value=0)
    nisa.dma_copy(dst=m, src=zero)         # metadata changed after prepare: the prepare's read stands
    nisa.dma_copy(dst=src, src=to_sbuf(x))  # srcs filled now, after the prepare
    if case == "two prepares":
        prep(srcs=[src], dsts=[out], replica_group=rg, metadata_tensor=m)
    elif case == "other kind":
        p2 = cc.all_gather_v_prepare(srcs=[src], dsts=[out], replica_group=rg, metadata_tensor=m)
    if case == "not a handle":
        trig(m)
    elif case == "wrong trigger":
        (cc.all_gather_v_trigger if op == "a2a" else cc.all_to_all_v_trigger)(p)
    elif case != "untriggered":
        trig(p)
    if case == "twice":
        trig(p)
    if case == "again":  # (edge: a second prepare after the first one's trigger)
        p2 = prep(srcs=[src], dsts=[out], replica_group=rg, metadata_tensor=_hbm_copy(meta))
        trig(p2)
    if case == "other kind":
        cc.all_gather_v_trigger(p2)
    return out


def _a2av_case(case="ok"):
    world, size, out_elems = 2, 10, 16
    xs = [_RNG.standard_normal((1, size)).astype(np.float32) for _ in range(world)]
    counts = np.array([[2, 3], [4, 1]])  # counts[j, k]: elements rank j sends to rank k
    metas = []
    for j in range(world):
        recv = counts[:, j]
        metas.append(np.stack([counts[j], [0, 5], recv, np.concatenate([[0], np.cumsum(recv)[:-1]])]
                              ).astype(np.uint32))
    expect = [np.full(out_elems, -1.0, np.float32) for _ in range(world)]
    for k in range(world):
        at = 0
        for j in range(world):
            cnt, start = counts[j, k], metas[j][1][k]
            expect[k][at:at + cnt] = xs[j][0, start:start + cnt]
            at += cnt
    return simulate_ranks(_split_k, world, xs, metas, op="a2a", out_elems=out_elems, case=case), expect


@pytest.mark.parametrize("case", ["ok", "again"])
def test_all_to_all_v_prepare_trigger_against_numpy(case):
    outs, expect = _a2av_case(case)
    for got, want in zip(outs, expect):
        np.testing.assert_array_equal(got.reshape(-1), want)


def test_all_gather_v_prepare_trigger_against_numpy():
    world, size, slot = 2, 10, 6
    xs = [_RNG.standard_normal((1, size)).astype(np.float32) for _ in range(world)]
    counts, starts = [3, 6], [2, 4]
    metas = [np.stack([np.full(2, counts[r]), np.full(2, starts[r])]).astype(np.uint32) for r in range(world)]
    outs = simulate_ranks(_split_k, world, xs, metas, op="ag", out_elems=2 * slot)
    want = np.full(2 * slot, -1.0, np.float32)
    for s in range(world):
        want[s * slot:s * slot + counts[s]] = xs[s][0, starts[s]:starts[s] + counts[s]]
    for got in outs:
        np.testing.assert_array_equal(got.reshape(-1), want)


@pytest.mark.parametrize("case,match", [
    ("two prepares", "has not been triggered; prepares share a single slot"),
    ("other kind", "has not been triggered; prepares share a single slot"),   # "of any kind"
    ("untriggered", "is never triggered"),
    ("twice", "already triggered"),
    ("not a handle", "prepare_instr must be the instruction"),
    ("wrong trigger", "pair it with all_to_all_v_trigger"),
])
def test_prepare_trigger_pairing_refused(case, match):
    with pytest.raises(NKIError, match=match):
        _a2av_case(case)


# --------------------------------------------------------------------------------------------------------
# 3. The kernel and compiler LNC degrees must match (NCC_EVRF066)
# --------------------------------------------------------------------------------------------------------
@nki.jit
def _double(x):
    return to_hbm(_twice(to_sbuf(x)))


def _twice(t):
    nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=2.0)
    return t


def _launch(bracket):
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    return (_double if bracket is None else _double[bracket])(x), 2 * x


@pytest.mark.parametrize("bracket,env,flags,have,want", [
    (1, "2", None, 1, 2),           # kernel[1] while the compiler uses 2
    (None, "2", "--lnc=1", 2, 1),   # NEURON_LOGICAL_NC_CONFIG=2 sets the kernel; --lnc=1 overrides the compiler
    (None, None, "-O1 --lnc 2", 1, 2),  # the kernel's implicit LNC=1
    (2, None, "--lnc=1", 2, 1),
])
def test_lnc_degree_mismatch_refused(bracket, env, flags, have, want, monkeypatch):
    for var, val in (("NEURON_LOGICAL_NC_CONFIG", env), ("NEURON_CC_FLAGS", flags)):
        monkeypatch.setenv(var, val) if val is not None else monkeypatch.delenv(var, raising=False)
    with pytest.raises(NKIError, match=rf"\[LNC degree\] NKI kernel '_double' is configured with LNC={have}, but "
                                       rf"neuronx-cc is using LNC={want}"):
        _launch(bracket)


@pytest.mark.parametrize("bracket,env,flags", [
    (None, None, None),             # nothing names the compiler's degree: unchecked
    (2, "2", None), (None, "1", None), (1, None, "--lnc=1"), (2, "1", "--lnc=2"), (None, "2", None),
])
def test_lnc_degree_match_runs(bracket, env, flags, monkeypatch):
    for var, val in (("NEURON_LOGICAL_NC_CONFIG", env), ("NEURON_CC_FLAGS", flags)):
        monkeypatch.setenv(var, val) if val is not None else monkeypatch.delenv(var, raising=False)
    got, want = _launch(bracket)
    np.testing.assert_array_equal(got, want)


def test_first_generation_grid_is_not_an_lnc_degree(monkeypatch):
    from nki_kernels.simulator import language as gen1_nl
    from nki_kernels.simulator import nki as gen1_nki

    @gen1_nki.jit
    def k(x):
        out = gen1_nl.ndarray(x.shape, x.dtype, buffer=gen1_nl.shared_hbm)
        gen1_nl.store(out, gen1_nl.multiply(gen1_nl.load(x), 2.0))
        return out

    monkeypatch.setenv("NEURON_CC_FLAGS", "--lnc=2")
    x = np.ones((2, 4), np.float32)
    np.testing.assert_array_equal(k[1](x), 2 * x)  # (an SPMD grid of one program, not LNC=1)


@nki.jit
def _half_per_core(x):
    """Each logical core doubles its half of the rows (nl.program_id / nl.num_programs): the result is
    2x only where a core ran, so it shows how many cores the launch had."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    n, c = nl.num_programs(0), nl.program_id(0)
    rows = x.shape[0] // n
    t = nl.ndarray((rows, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x[c * rows:(c + 1) * rows, :])
    nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=float(n))
    nisa.dma_copy(dst=out[c * rows:(c + 1) * rows, :], src=t)
    return out


@pytest.mark.parametrize("env,cores", [(None, 1), ("1", 1), ("2", 2)])
def test_neuron_logical_nc_config_sets_a_plain_calls_degree(env, cores, monkeypatch):
    # nki.jit page (2.33.1): "Configure the LNC degree by setting the NEURON_LOGICAL_NC_CONFIG environment
    # variable to 1 or 2 before invoking the kernel. If the LNC degree is not explicitly set, the default is
    # LNC=1" -- each core scales by the number of cores it sees, so the values tell the degree
    monkeypatch.delenv("NEURON_CC_FLAGS", raising=False)
    monkeypatch.setenv("NEURON_LOGICAL_NC_CONFIG", env) if env else monkeypatch.delenv("NEURON_LOGICAL_NC_CONFIG",
                                                                                       raising=False)
    x = np.arange(32, dtype=np.float32).reshape(8, 4)
    np.testing.assert_array_equal(_half_per_core(x), x * np.float32(cores))
    np.testing.assert_array_equal(nki.simulate(_half_per_core)(x), x * np.float32(cores))
