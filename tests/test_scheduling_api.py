"""The current API's scheduling controls, from the NKI guide "How to Use the NKI Scheduling APIs" and
the ``nki.isa.NkiInstruction`` / ``nki.language.no_reorder`` pages and the dynamic-loops deep dive:
every ``nki.isa`` call returns an ``NkiInstruction`` (``depends_on``), ``nl.no_reorder()`` blocks,
``kernel.with_schedule``. Values are checked against NumPy; the rules each have a refused case and an
allowed edge case; in a profile, an edge makes the consumer start after its producer ends."""

import numpy as np
import pytest

from nki_kernels.simulator import NKIError, install, profile

install()
import nki  # noqa: E402
import nki.isa as nisa  # noqa: E402
import nki.language as nl  # noqa: E402


# --------------------------------------------------------------------------------------------------------
# the guide's examples
# --------------------------------------------------------------------------------------------------------
@nki.jit()
def recip_plus1(t):
    x = nl.ndarray(t.shape, t.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=x, src=t)
    a = nl.ndarray(t.shape, t.dtype, buffer=nl.sbuf)
    b = nl.ndarray(t.shape, t.dtype, buffer=nl.sbuf)
    c = nl.ndarray(t.shape, t.dtype, buffer=nl.sbuf)
    nisa.reciprocal(dst=a, data=x, name="recip")
    nisa.tensor_scalar(dst=b, data=x, op0=nl.add, operand0=1, name="plus1")
    nisa.tensor_tensor(dst=c, data1=a, data2=b, op=nl.add)
    out = nl.ndarray(t.shape, t.dtype, buffer=nl.hbm)
    nisa.dma_copy(dst=out, src=c)
    return out


def _exp_loads(args):
    tiles = []
    for inp in args:
        t = nl.ndarray(inp.shape, inp.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=inp)
        tiles.append(t)
    return tiles


def _exp_one(i, in_tiles, out_tiles):
    tile = in_tiles[i]
    out_tile = nl.ndarray(tile.shape, tile.dtype, buffer=nl.sbuf)
    nisa.activation(dst=out_tile, data=tile, op=nl.exp, name=f"act{i}")
    out_tiles.append(out_tile)


def _exp_stores(out_tiles):
    outs = []
    for tile in out_tiles:
        out = nl.ndarray(tile.shape, tile.dtype, buffer=nl.hbm)
        nisa.dma_copy(dst=out, src=tile)
        outs.append(out)
    return tuple(outs)


@nki.jit
def exp3(a, b, c):
    in_tiles, out_tiles = _exp_loads((a, b, c)), []
    for i in range(len(in_tiles)):
        _exp_one(i, in_tiles, out_tiles)
    return _exp_stores(out_tiles)


@nki.jit()
def exp3_no_reorder(a, b, c):
    in_tiles, out_tiles = _exp_loads((a, b, c)), []
    with nl.no_reorder():  # dynamically scoped: _exp_one's instructions are in the block
        for i in range(len(in_tiles)):
            _exp_one(i, in_tiles, out_tiles)
    return _exp_stores(out_tiles)


def _inputs(n=3, shape=(128, 512)):
    rng = np.random.default_rng(0)
    return [rng.uniform(0.5, 2.0, shape).astype(np.float32) for _ in range(n)]


def test_with_schedule_examples_compute_the_same_values():
    x = _inputs(1)[0]
    ref = 1.0 / x + (x + 1.0)
    for k in (recip_plus1, recip_plus1.with_schedule([("plus1", "recip")]),
              recip_plus1.with_schedule([("plus1", ["recip"])])):
        np.testing.assert_allclose(k(x), ref, rtol=1e-6)
    xs = _inputs()
    chain = exp3.with_schedule([(f"act{i}", f"act{i - 1}") for i in range(1, 3)])
    for k in (exp3, chain, exp3_no_reorder):
        for got, want in zip(k(*xs), xs):
            np.testing.assert_allclose(got, np.exp(want), rtol=1e-6)


def test_instructions_return_handles_and_depends_on_chains():
    seen = {}

    @nki.jit
    def k(t):
        x = nl.ndarray(t.shape, t.dtype, buffer=nl.sbuf)
        a = nisa.dma_copy(dst=x, src=t)
        y = nl.ndarray(t.shape, t.dtype, buffer=nl.sbuf)
        b = nisa.tensor_scalar(dst=y, data=x, op0=nl.multiply, operand0=2.0)
        c = nisa.activation(dst=y, data=y, op=nl.copy)
        seen["chain"] = c.depends_on(b).depends_on(a)
        seen["two"] = c.depends_on(b, a)
        seen["handles"] = (a, b, c)
        out = nl.ndarray(t.shape, t.dtype, buffer=nl.hbm)
        nisa.dma_copy(dst=out, src=y)
        return out

    x = _inputs(1)[0]
    np.testing.assert_allclose(k(x), 2 * x, rtol=1e-6)
    a, b, c = seen["handles"]
    assert all(isinstance(h, nisa.NkiInstruction) for h in (a, b, c))
    assert seen["chain"] is c and seen["two"] is c
    # a handle kept past the kernel's return adds nothing: the kernel has been traced
    with pytest.raises(NKIError, match=r"\[depends_on\].*has returned"):
        c.depends_on(a)


def test_first_generation_instructions_still_return_none():
    import neuronxcc.nki as nki1
    import neuronxcc.nki.isa as nisa1
    import neuronxcc.nki.language as nl1
    got = {}

    @nki1.jit
    def k(t):
        out = nl1.ndarray(t.shape, dtype=t.dtype, buffer=nl1.shared_hbm)
        x = nl1.ndarray(t.shape, dtype=t.dtype, buffer=nl1.sbuf)
        got["r"] = nisa1.dma_copy(dst=x, src=t)
        nl1.store(out, value=x)
        return out

    x = _inputs(1)[0]
    np.testing.assert_array_equal(k(x), x)
    assert got["r"] is None


# --------------------------------------------------------------------------------------------------------
# rules: refused cases and the allowed edge of each
# --------------------------------------------------------------------------------------------------------
def test_with_schedule_names_must_exist_and_pairs_have_form():
    x = _inputs(1)[0]
    with pytest.raises(NKIError, match=r"\[with_schedule\].*'plus2'.*'plus1', 'recip'"):
        recip_plus1.with_schedule([("plus2", "recip")])(x)
    for bad in ("plus1", [("plus1",)], [("plus1", 3)], [(1, "recip")], 5):
        with pytest.raises(NKIError, match=r"\[with_schedule\]"):
            recip_plus1.with_schedule(bad)
    with pytest.raises(NKIError, match=r"\[with_schedule\].*itself"):
        recip_plus1.with_schedule([("plus1", "plus1")])(x)
    import neuronxcc.nki as nki1

    @nki1.jit
    def gen1(t):
        return t

    with pytest.raises(AttributeError, match="nki.jit"):
        gen1.with_schedule([("a", "b")])


def test_edges_forming_a_cycle_are_refused():
    x = _inputs(1)[0]
    with pytest.raises(NKIError, match=r"\[schedule cycle\].*'recip'.*'plus1'"):
        recip_plus1.with_schedule([("plus1", "recip"), ("recip", "plus1")])(x)

    @nki.jit
    def k(t, cyclic):
        y = nl.ndarray(t.shape, t.dtype, buffer=nl.sbuf)
        a = nisa.dma_copy(dst=y, src=t)
        b = nisa.tensor_scalar(dst=y, data=y, op0=nl.add, operand0=1.0)
        b.depends_on(a)
        if cyclic:
            a.depends_on(b)
        out = nl.ndarray(t.shape, t.dtype, buffer=nl.hbm)
        nisa.dma_copy(dst=out, src=y)
        return out

    np.testing.assert_allclose(k(x, False), x + 1, rtol=1e-6)
    with pytest.raises(NKIError, match=r"\[schedule cycle\]"):
        k(x, True)


def _loop_kernel(case):
    @nki.jit
    def k(t):
        x = nl.ndarray(t.shape, t.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=x, src=t)
        acc = nl.ndarray(t.shape, t.dtype, buffer=nl.sbuf)
        nisa.memset(dst=acc, value=0.0)
        reg = nisa.register_alloc(3)

        def add(i=None):
            return nisa.tensor_tensor(dst=acc, data1=acc, data2=x, op=nl.add)

        if case == "dynamic_range in block":
            with nl.no_reorder():
                for _ in nl.dynamic_range(reg):
                    add()
        elif case == "fori_loop in block":
            with nl.no_reorder():
                nl.fori_loop(0, reg, add)
        elif case == "while_loop in block":
            with nl.no_reorder():
                nl.while_loop(nisa.register_alloc(0), lambda r: r)  # (0: the body would never run)
        elif case == "block in dynamic_range":
            for _ in nl.dynamic_range(reg):
                with nl.no_reorder():
                    add()
        elif case == "static loops in block":
            with nl.no_reorder():
                for _ in nl.affine_range(1):
                    add()
                for _ in nl.sequential_range(1):
                    add()
                for _ in nl.static_range(1):
                    add()
        elif case == "edge out of a dynamic loop":
            inside = []
            nl.fori_loop(0, reg, lambda i: inside.append(add()))
            nisa.tensor_scalar(dst=acc, data=acc, op0=nl.add, operand0=0.0).depends_on(inside[-1])
        elif case == "edge between two dynamic loops":
            inside = []
            for _ in nl.dynamic_range(reg):
                inside.append(add())
            for _ in nl.dynamic_range(1):
                add().depends_on(inside[-1])
        elif case == "producer in an enclosing scope":
            p = nisa.tensor_scalar(dst=acc, data=acc, op0=nl.add, operand0=0.0)
            for _ in nl.dynamic_range(reg):
                add().depends_on(p)
        elif case == "same dynamic loop":
            def body(i):
                a = add()
                nisa.tensor_scalar(dst=acc, data=acc, op0=nl.add, operand0=0.0).depends_on(a)
            nl.fori_loop(0, reg, body)
        elif case == "producer not a handle":
            add().depends_on(x)
        elif case == "self":
            a = add()
            a.depends_on(a)
        out = nl.ndarray(t.shape, t.dtype, buffer=nl.hbm)
        nisa.dma_copy(dst=out, src=acc)
        return out

    return k


@pytest.mark.parametrize("case,rule", [
    ("dynamic_range in block", "no_reorder"), ("fori_loop in block", "no_reorder"),
    ("while_loop in block", "no_reorder"), ("edge out of a dynamic loop", "depends_on"),
    ("edge between two dynamic loops", "depends_on"), ("producer not a handle", "depends_on"),
    ("self", "depends_on")])
def test_rule_refuses(case, rule, monkeypatch):
    if "dynamic_range" in case or "two dynamic loops" in case:
        # nl.dynamic_range: NKI 0.7.0 keeps it only under the previous specialization (NKI_COMPILER_FRONTEND=custom)
        monkeypatch.setenv("NKI_COMPILER_FRONTEND", "custom")
    with pytest.raises(NKIError, match=rf"\[{rule}\]"):
        _loop_kernel(case)(np.ones((128, 8), np.float32))


@pytest.mark.parametrize("case,adds", [("block in dynamic_range", 3), ("static loops in block", 3),
                                       ("producer in an enclosing scope", 3), ("same dynamic loop", 3)])
def test_rule_allows(case, adds, monkeypatch):
    if case in ("block in dynamic_range", "producer in an enclosing scope"):
        monkeypatch.setenv("NKI_COMPILER_FRONTEND", "custom")  # nl.dynamic_range: see test_rule_refuses
    x = _inputs(1, (128, 8))[0]
    np.testing.assert_allclose(_loop_kernel(case)(x), adds * x, rtol=1e-6)


def test_no_reorder_outside_a_current_api_kernel():
    with pytest.raises(NKIError, match="inside a running kernel"):
        with nl.no_reorder():
            pass


# --------------------------------------------------------------------------------------------------------
# the timing model honours the edges
# --------------------------------------------------------------------------------------------------------
def _two_engines(t, mode):
    x = nl.ndarray(t.shape, t.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=x, src=t)
    a = nl.ndarray(t.shape, t.dtype, buffer=nl.sbuf)
    b = nl.ndarray(t.shape, t.dtype, buffer=nl.sbuf)
    if mode == "no_reorder":
        with nl.no_reorder():
            nisa.activation(dst=a, data=x, op=nl.exp, name="act")
            nisa.tensor_scalar(dst=b, data=x, op0=nl.add, operand0=1.0, name="plus1")
    elif mode == "backward":
        c = nisa.tensor_scalar(dst=b, data=x, op0=nl.add, operand0=1.0, name="plus1")
        c.depends_on(nisa.activation(dst=a, data=x, op=nl.exp, name="act"))
    else:
        p = nisa.activation(dst=a, data=x, op=nl.exp, name="act")
        c = nisa.tensor_scalar(dst=b, data=x, op0=nl.add, operand0=1.0, name="plus1")
        if mode == "depends_on":
            c.depends_on(p)
    o1 = nl.ndarray(t.shape, t.dtype, buffer=nl.hbm)
    o2 = nl.ndarray(t.shape, t.dtype, buffer=nl.hbm)
    nisa.dma_copy(dst=o1, src=a)
    nisa.dma_copy(dst=o2, src=b)
    return o1, o2


@nki.jit
def two_engines(t, mode=""):
    return _two_engines(t, mode)


def _times(kernel, x, mode):
    rep = profile(kernel, x, mode=mode)
    got = kernel(x, mode=mode)
    np.testing.assert_allclose(got[0], np.exp(x), rtol=1e-6)
    np.testing.assert_allclose(got[1], x + 1, rtol=1e-6)
    res = rep.timing
    names = [e.name for e in res.events]
    i, j = names.index("activation"), names.index("tensor_scalar")
    assert (res.events[i].engine, res.events[j].engine) == ("Scalar", "Vector")
    return rep, res, i, j


@pytest.mark.parametrize("mode", ["depends_on", "no_reorder", "with_schedule"])
def test_profile_consumer_starts_after_its_producer(mode):
    x = _inputs(1, (128, 2048))[0]
    _, res, i, j = _times(two_engines, x, "")
    assert res.start[j] < res.end[i]  # independent: the Vector op overlaps the Scalar one
    kernel = two_engines.with_schedule([("plus1", "act")]) if mode == "with_schedule" else two_engines
    _, res, i, j = _times(kernel, x, "" if mode == "with_schedule" else mode)
    assert res.start[j] >= res.end[i]
    assert res.cause[j] == "edge" and res.pred[j] == i


def test_profile_says_it_cannot_honour_a_backward_edge():
    x = _inputs(1, (128, 2048))[0]
    rep, res, i, j = _times(two_engines, x, "backward")
    assert j < i and res.start[j] < res.end[i]
    assert any("later in program order" in line for line in res.advice())


# --------------------------------------------------------------------------------------------------------
# the page's type names
# --------------------------------------------------------------------------------------------------------
def test_memory_region_and_dtype_names():
    assert nl.MemoryRegion.sbuf is nl.sbuf and nl.MemoryRegion.psum is nl.psum
    assert nl.MemoryRegion.shared_hbm is nl.shared_hbm and nl.MemoryRegion.private_hbm is nl.private_hbm
    assert all(isinstance(m, nl.MemoryRegion) for m in (nl.sbuf, nl.psum, nl.hbm, nl.shared_hbm))
    assert nl.hbm.value == "private_hbm" and nl.sbuf.value == "sbuf"  # "hbm: Alias of private_hbm"
    assert all(isinstance(d, nl.DType) for d in (nl.float32, nl.bfloat16, nl.int8, nl.float8_e4m3))
    assert nl.is_sbuf(buffer=nl.sbuf) and nl.is_psum(buffer=nl.psum) and nl.is_hbm(buffer=nl.shared_hbm)
    assert nl.is_on_chip(buffer=nl.psum) and not nl.is_on_chip(buffer=nl.hbm) and not nl.is_sbuf(nl.psum)
    with pytest.raises(TypeError, match="nl.is_sbuf: buffer must be"):
        nl.is_sbuf(3)


def test_jit_takes_its_function_as_fn():
    """``nki.jit(fn=None, **kwargs)`` (the nki page): the function may be passed by keyword."""
    def copy(t):
        x = nl.ndarray(t.shape, t.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=x, src=t)
        out = nl.ndarray(t.shape, t.dtype, buffer=nl.hbm)
        nisa.dma_copy(dst=out, src=x)
        return out

    x = _inputs(1, (4, 8))[0]
    np.testing.assert_array_equal(nki.jit(fn=copy)(x), x)
    np.testing.assert_array_equal(nki.jit()(copy)(x), x)


def test_nki_tensor_moved_to_nki_meta_tensor():
    """"``nki.tensor`` has moved to ``nki.meta.tensor``" (NKI 0.2.0 release notes): both imports work."""
    import importlib

    moved = importlib.import_module("nki.meta.tensor")
    from nki.meta import tensor

    assert moved is tensor is nki.tensor
    assert issubclass(nl.NkiTensor, tensor.NkiTensor) or tensor.NkiTensor is nl.NkiTensor


def test_with_schedule_keeps_the_kernels_options_and_compiler_flags():
    import nki.compiler as ncc

    flagged = ncc.skip_middle_end_transformations(nki.jit(additional_compile_opt="-O1")(recip_plus1.func))
    scheduled = flagged.with_schedule([("plus1", "recip")])
    assert scheduled is not flagged and flagged.schedule == ()
    assert scheduled.options == flagged.options
    assert scheduled._nki_compiler_flags == flagged._nki_compiler_flags
    x = _inputs(1)[0]
    np.testing.assert_allclose(scheduled(x), 1.0 / x + (x + 1.0), rtol=1e-6)
