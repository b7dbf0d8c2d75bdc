"""Published NKI tutorial latencies against the engine-level timing model (issue 31, "How fast on
Trainium"): the fused Mamba tutorial's kernels, run unmodified from an nki-samples checkout on the
simulator under ``profile()``, and the documentation's pseudo-code speed-up claims.

**Fused Mamba.** aws-neuron-sdk ``nki/guides/tutorials/fused_mamba.rst`` publishes device latencies
of ``mamba_v1`` / ``mamba_v2`` / ``mamba_v3`` (nki-samples
``src/nki_samples/tutorials/fused_mamba/mamba_nki_kernels.py``, first-generation ``neuronxcc.nki``
API). The kernels are imported from ``--samples DIR`` with ``nki_kernels.simulator.install()`` in
place of ``neuronxcc`` (nothing is copied into this repository), run once each under ``profile()``
with the simulated target NeuronCore-v2, and the recorded instructions are scheduled on every
``--versions`` (``Report.retime``). The page does not name the instance; the matmul tutorial of the
same era measured on Trn1.32xlarge, so NeuronCore-v2 (trn1) is the primary target here (an
assumption). Inputs are random fp32 (the timing does not depend on values) and every output is
checked against a NumPy reference of the selective scan.

Published cases (all batch 1, state_size 16, fp32):

* ``mamba_v1`` [seq_len 512, channels 256]: 172.93 us (text);
* ``mamba_v1`` / ``mamba_v2`` [512, 4096]: 2.34 / 1.61 ms (text);
* the scaling table, channels 4096, seq_len 512 ... 8192: ``mamba_v2`` 1.6 ... 52.2 ms and
  ``mamba_v3`` 1.6 ... 27.8 ms (the text's own ``mamba_v2`` profile at 8192 says 53.33 ms; the table's
  52.2 is used). At 512 the table gives v2 = v3 = 1.6 ms and the text 1.61 ms for v2.

Same-shape pairs in the published order: v1 slower than v2 and than v3 at [512, 4096], v2 slower
than v3 at every seq_len from 1024 (at 512 they are equal, 1.61 / 1.6 ms: no pair). 10 pairs.

**Documented speed-up ratios** (pseudo-code in the pages, written here as small first-generation
kernels; the ratio is of the compute engines' busy time, which in these kernels is one dependent
chain: its latency once the inputs are on chip, since the pages speak of the instructions; the whole
kernel's estimate, loads and store included, is shown beside it):

* ``nki_perf_guide.rst`` (Opt #6): on a [128, 512] tile, ``nl.multiply`` by a [128, 1] scale,
  ``nl.add`` of a [128, 1] bias, ``nl.exp`` ("impl 1") against one ``nisa.activation(nl.exp, data,
  bias, scale)`` ("impl 2"): "``impl 2`` is 3x faster in terms of latency". The page gives no dtype:
  fp32 here;
* ``fused_mamba.rst`` Step 4: the scan over a [128, 512] tile as ``seq_len - 1`` steps of
  ``nl.multiply`` then ``nl.add`` on [128, 1] columns, against the same steps as one
  ``nisa.tensor_scalar(op0=multiply, op1=add)`` each: "could provide 2x speedup"; and the single
  ``nisa.tensor_tensor_scan`` the page recommends instead (no figure given: shown, not scored).

Nothing in the model is tuned to these numbers.

Usage::

    python scripts/timing_tutorials.py --samples PATH/TO/nki-samples [--versions 2 3] [--quick]
        [--all] [--cases NAME ...] [--json PATH]

``--quick`` runs the smallest Mamba case and the pseudo-code ratios (seconds); the default runs every
case that profiles in under about 3 minutes on the 2-core development host (``SLOW`` lists those
left out, ``--all`` adds them); ``--cases`` picks cases by name (``mamba_v2/L8192`` ...).
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import os
import resource
import sys
import time
from collections import defaultdict

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
_HERE = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.dirname(_HERE)
if _ROOT not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, _ROOT)

import numpy as np

from nki_kernels.simulator import install, profile
from nki_kernels.simulator.instructions.target import use as _use_target

VERSIONS = (2, 3)
MAMBA_FILE = os.path.join("src", "nki_samples", "tutorials", "fused_mamba", "mamba_nki_kernels.py")
COMPUTE = ("Tensor", "Vector", "Scalar", "GpSimd")

_TABLE_SEQ = (512, 1024, 2048, 3072, 4096, 5120, 6144, 7168, 8192)
_TABLE_V2 = (1.6, 4.4, 8.9, 13.1, 17.6, 23.7, 27.5, 41.3, 52.2)
_TABLE_V3 = (1.6, 3.3, 6.6, 10.1, 13.3, 17.3, 19.6, 24.2, 27.8)


def _case(kernel, seq_len, channels, ms, source):
    return {"name": f"{kernel}/L{seq_len}" + ("" if channels == 4096 else f"/C{channels}"), "kernel": kernel,
            "shape": {"batch": 1, "seq_len": seq_len, "channels": channels, "state_size": 16},
            "published_ms": ms, "source": source}


# Every published Mamba latency (aws-neuron-sdk HEAD fb4ce106, nki/guides/tutorials/fused_mamba.rst).
CASES = [_case("mamba_v1", 512, 256, 0.17293, "text: 172.93 usec"),
         _case("mamba_v1", 512, 4096, 2.34, "text: 2.34 ms"),
         _case("mamba_v2", 512, 4096, 1.61, "text: 1.61 ms (table 1.6)")]
CASES += [_case("mamba_v2", L, 4096, ms, "table" + ("; text 53.33 ms" if L == 8192 else ""))
          for L, ms in zip(_TABLE_SEQ, _TABLE_V2) if L != 512]
CASES += [_case("mamba_v3", L, 4096, ms, "table" + ("; text 27.8 ms" if L == 8192 else ""))
          for L, ms in zip(_TABLE_SEQ, _TABLE_V3)]
QUICK = ("mamba_v1/L512/C256",)
# Cases left out of the default run: none profiled in over ~3 minutes on the 2-core host (the slowest,
# mamba_v3/L8192, about 80 s; mamba_v2 at 7168-8192 needs about 13 GB of memory). Kept for --all.
SLOW: tuple = ()


def published_pairs(cases=CASES):
    """``(slower, faster)`` case names of every pair with the same shape and different published times."""
    by_shape = defaultdict(list)
    for c in cases:
        by_shape[tuple(sorted(c["shape"].items()))].append(c)
    pairs = []
    for group in by_shape.values():
        for i, a in enumerate(group):
            for b in group[i + 1:]:
                if round(a["published_ms"], 1) != round(b["published_ms"], 1):  # (1.61 and 1.6 ms: equal)
                    slow, fast = (a, b) if a["published_ms"] > b["published_ms"] else (b, a)
                    pairs.append((slow["name"], fast["name"]))
    return pairs


def pair_order(pairs, estimates):
    """``[(slower, faster, right)]`` for the pairs whose both cases have an estimate: ``right`` when the
    estimate of the published slower case is the larger."""
    return [(s, f, estimates[s] > estimates[f]) for s, f in pairs if s in estimates and f in estimates]


# --------------------------------------------------------------------------------------------------------
# the Mamba kernels
# --------------------------------------------------------------------------------------------------------
def mamba_module(samples):
    """nki-samples' ``mamba_nki_kernels`` module, imported unmodified from the checkout ``samples`` (its
    root, its ``src``, or the ``fused_mamba`` folder) with the simulator standing in for ``neuronxcc``."""
    candidates = [os.path.join(samples, MAMBA_FILE), os.path.join(samples, *MAMBA_FILE.split(os.sep)[1:]),
                  os.path.join(samples, "mamba_nki_kernels.py")]
    path = next((p for p in candidates if os.path.isfile(p)), None)
    if path is None:
        raise FileNotFoundError(f"no {MAMBA_FILE} under {samples}")
    install()
    spec = importlib.util.spec_from_file_location("mamba_nki_kernels", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def mamba_inputs(batch, seq_len, channels, state_size, seed=0):
    """Random fp32 ``delta, u, A, B, C`` in the kernels' layouts (delta a small positive step, A negative,
    as after Mamba's softplus and -exp: the scan stays bounded)."""
    rng = np.random.default_rng(seed)
    f32 = np.float32
    delta = rng.uniform(0.001, 0.1, (batch, channels, seq_len)).astype(f32)
    u = rng.standard_normal((batch, channels, seq_len), dtype=f32)
    A = -rng.uniform(0.5, 2.0, (channels, state_size)).astype(f32)
    B = rng.standard_normal((batch, state_size, seq_len), dtype=f32)
    C = rng.standard_normal((batch, state_size, seq_len), dtype=f32)
    return delta, u, A, B, C


def mamba_reference(delta, u, A, B, C):
    """The selective scan in NumPy (fp64), one time step at a time:
    ``x_t = exp(delta_t A) x_{t-1} + delta_t u_t B_t``, ``out_t = sum_state C_t x_t``."""
    delta, u, A, B, C = (np.asarray(a, np.float64) for a in (delta, u, A, B, C))
    batch, channels, seq_len = delta.shape
    x = np.zeros((batch, channels, A.shape[1]))
    out = np.empty((batch, channels, seq_len))
    for t in range(seq_len):
        d = delta[:, :, t, None]
        x = np.exp(d * A[None]) * x + (d * u[:, :, t, None]) * B[:, None, :, t]
        out[:, :, t] = np.einsum("bcs,bs->bc", x, C[:, :, t])
    return out


# --------------------------------------------------------------------------------------------------------
# the documentation's pseudo-code
# --------------------------------------------------------------------------------------------------------
def pseudo_code_kernels():
    """``{pair name: {"claim", "source", "variants": {name: (kernel, make_inputs, reference)}}}``: the
    pages' pseudo-code as first-generation kernels on one [128, 512] fp32 tile."""
    from nki_kernels.simulator import isa as nisa
    from nki_kernels.simulator import language as nl
    from nki_kernels.simulator import nki

    P, N = 128, 512

    @nki.jit
    def perf_guide_impl1(data, scale, bias):
        """Opt #6 impl 1: three instructions."""
        out = nl.ndarray(data.shape, dtype=data.dtype, buffer=nl.shared_hbm)
        d, s, b = nl.load(data), nl.load(scale), nl.load(bias)
        scaled = nl.multiply(d, s)
        shifted = nl.add(scaled, b)
        exp = nl.exp(shifted)
        nl.store(out, value=exp)
        return out

    @nki.jit
    def perf_guide_impl2(data, scale, bias):
        """Opt #6 impl 2: one ``activation`` with scale and bias."""
        out = nl.ndarray(data.shape, dtype=data.dtype, buffer=nl.shared_hbm)
        d, s, b = nl.load(data), nl.load(scale), nl.load(bias)
        exp = nisa.activation(nl.exp, d, bias=b, scale=s)
        nl.store(out, value=exp)
        return out

    def act_inputs():
        rng = np.random.default_rng(2)
        return (rng.standard_normal((P, N), dtype=np.float32), rng.uniform(0.1, 1, (P, 1)).astype(np.float32),
                rng.uniform(-1, 0, (P, 1)).astype(np.float32))

    def act_ref(data, scale, bias):
        return np.exp(data.astype(np.float64) * scale + bias)

    def _scan(step):
        @nki.jit
        def scan(deltaA, deltaBu):
            out = nl.ndarray(deltaA.shape, dtype=deltaA.dtype, buffer=nl.shared_hbm)
            a, bu = nl.load(deltaA), nl.load(deltaBu)
            if step == "tensor_tensor_scan":
                res = nisa.tensor_tensor_scan(a, bu, initial=0, op0=np.multiply, op1=np.add)
                nl.store(out, value=res)
                return out
            res = nl.ndarray((nl.par_dim(P), N), dtype=deltaA.dtype, buffer=nl.sbuf)
            res[:, 0:1] = nl.copy(bu[:, 0:1])
            for i in nl.sequential_range(N - 1):
                if step == "multiply_add":
                    res[:, i + 1:i + 2] = nl.add(nl.multiply(a[:, i + 1:i + 2], res[:, i:i + 1]), bu[:, i + 1:i + 2])
                else:
                    res[:, i + 1:i + 2] = nisa.tensor_scalar(a[:, i + 1:i + 2], op0=np.multiply,
                                                             operand0=res[:, i:i + 1], op1=np.add,
                                                             operand1=bu[:, i + 1:i + 2])
            nl.store(out, value=res)
            return out
        scan.__name__ = scan.__qualname__ = f"scan_{step}"
        return scan

    def scan_inputs():
        rng = np.random.default_rng(3)
        return rng.uniform(0.5, 1.0, (P, N)).astype(np.float32), rng.standard_normal((P, N), dtype=np.float32)

    def scan_ref(a, bu):
        out = np.empty((P, N))
        x = np.zeros(P)
        for t in range(N):
            x = a[:, t] * x + bu[:, t]
            out[:, t] = x
        return out

    return {
        "perf guide Opt #6 [128, 512] fp32": {
            "claim": 3.0, "source": "nki_perf_guide.rst: 'impl 2 is 3x faster in terms of latency'",
            "variants": {"impl 1: multiply, add, exp": (perf_guide_impl1, act_inputs, act_ref),
                         "impl 2: activation(exp, scale, bias)": (perf_guide_impl2, act_inputs, act_ref)}},
        "Mamba scan [128, 512] fp32": {
            "claim": 2.0, "source": "fused_mamba.rst Step 4: tensor_scalar 'could provide 2x speedup'",
            "variants": {"multiply + add per step": (_scan("multiply_add"), scan_inputs, scan_ref),
                         "tensor_scalar per step": (_scan("tensor_scalar"), scan_inputs, scan_ref),
                         "tensor_tensor_scan": (_scan("tensor_tensor_scan"), scan_inputs, scan_ref)}},
    }


# --------------------------------------------------------------------------------------------------------
# profiling
# --------------------------------------------------------------------------------------------------------
def compute_busy(res):
    """Seconds the compute engines are busy in a timing ``Result`` (summed over instructions). In the
    pseudo-code kernels the compute instructions form one dependent chain, so this is the chain's latency
    once the inputs are on chip (the span from first to last would include waits for the loads)."""
    return sum(res.end[i] - res.start[i] for i, e in enumerate(res.events) if e.engine in COMPUTE)


def dominant(res):
    """``(engine, instruction, elements per partition, count, share)`` of the instruction kind with the
    most busy time on the bounding engine (share: of that engine's busy time)."""
    eng = res.bounding_engine
    agg = defaultdict(lambda: [0, 0.0])
    for i, e in enumerate(res.events):
        if (e.engine == eng) or (eng == "DMA" and e.engine == "DMA"):
            k = (e.name, e.free_elems if e.engine != "DMA" else e.partitions)
            agg[k][0] += 1
            agg[k][1] += res.end[i] - res.start[i]
    if not agg:
        return None
    (name, n), (count, busy) = max(agg.items(), key=lambda kv: kv[1][1])
    total = sum(b for _, b in agg.values())
    return {"engine": eng, "instruction": name, "free_elems": n, "count": count, "share": busy / total if total else 0}


def figures(res):
    """The figures of one version's schedule."""
    return {"ms": res.total_s * 1e3, "compute_busy_ms": compute_busy(res) * 1e3, "bound": res.bounding_engine,
            "utilisation": {k: round(v, 4) for k, v in res.utilisation.items()}, "dominant": dominant(res),
            "spills": dict(res.spills), "dma_transfers": res.dma.transfers}


def run_profile(kernel, arrays, versions=VERSIONS):
    """Profile ``kernel(*arrays)`` with NeuronCore-v2 simulated; the report's outputs and figures per version,
    and the profile's wall time."""
    t0 = time.perf_counter()
    with _use_target("gen2"):
        rep = profile(kernel, *arrays)
    wall = time.perf_counter() - t0
    per_version = {v: figures(rep.timing if v == rep.version else rep.retime(v)) for v in versions}
    out = np.asarray(rep.outputs)
    instructions = dict(rep.instructions)
    del rep
    gc.collect()
    return out, per_version, wall, instructions


def _rel_err(out, ref):
    return float(np.max(np.abs(np.asarray(out, np.float64) - ref)) / max(np.max(np.abs(ref)), 1e-30))


def run_mamba(mod, cases, versions=VERSIONS, log=print):
    """Profile each Mamba case; ``{name: row}``."""
    rows, refs = {}, {}
    for c in cases:
        sh = c["shape"]
        key = (sh["batch"], sh["seq_len"], sh["channels"], sh["state_size"])
        arrays = mamba_inputs(*key)
        out, per_version, wall, instructions = run_profile(getattr(mod, c["kernel"]), arrays, versions)
        if key not in refs:
            refs = {key: mamba_reference(*arrays)}  # (one shape's reference kept: the cases are grouped by shape)
        err = _rel_err(out, refs[key])
        rows[c["name"]] = dict(c, versions=per_version, profile_s=wall, rel_err=err, instructions=instructions,
                               max_rss_gb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20)
        v0 = per_version[versions[0]]
        log(f"  {c['name']:<22} v{versions[0]} {v0['ms']:9.3f} ms  published {c['published_ms']:g} ms  "
            f"ratio {v0['ms'] / c['published_ms']:.2f}  ({v0['bound']})  profile {wall:.1f} s  rel.err {err:.1e}")
    return rows


def run_pseudo_code(versions=VERSIONS, log=print):
    """Profile the documentation's pseudo-code pairs; ``{pair: {"claim", "source", "variants": {name: row}}}``."""
    result = {}
    for pair, spec in pseudo_code_kernels().items():
        rows = {}
        for name, (kernel, make, ref) in spec["variants"].items():
            arrays = make()
            out, per_version, wall, _ = run_profile(kernel, arrays, versions)
            rows[name] = {"versions": per_version, "profile_s": wall, "rel_err": _rel_err(out, ref(*arrays))}
        result[pair] = {"claim": spec["claim"], "source": spec["source"], "variants": rows}
        log(f"  {pair}: " + ", ".join(f"{n} {r['versions'][versions[0]]['compute_busy_ms'] * 1e3:.2f} us"
                                      for n, r in rows.items()))
    return result


# --------------------------------------------------------------------------------------------------------
# printing
# --------------------------------------------------------------------------------------------------------
def _fmt_ms(ms):
    return f"{ms:.3f}" if ms < 10 else f"{ms:.2f}"


def print_tables(result, versions, console=None):
    from rich.console import Console
    from rich.table import Table

    console = console or Console(width=max(140, Console().width))
    rows = result["mamba"]
    if rows:
        t = Table(title="fused Mamba tutorial (batch 1, state 16, fp32): profile() estimate vs published device "
                        "latency (instance not named: trn1 = NeuronCore-v2 assumed)")
        t.add_column("kernel")
        t.add_column("seq_len x channels")
        for v in versions:
            t.add_column(f"v{v} ms", justify="right")
        t.add_column("published ms", justify="right")
        for v in versions:
            t.add_column(f"v{v} / pub.", justify="right")
        t.add_column(f"v{versions[0]} bound (util.): dominant instruction")
        t.add_column("profile s", justify="right")
        t.add_column("rel. err", justify="right")
        for name, r in rows.items():
            sh = r["shape"]
            v0 = r["versions"][versions[0]]
            d = v0["dominant"]
            dom = (f"{v0['bound']} {v0['utilisation'][v0['bound']]:.0%}: {d['instruction']} N={d['free_elems']} "
                   f"x{d['count']} ({d['share']:.0%})") if d else v0["bound"]
            if v0["spills"].get("stores"):
                dom += f", {v0['spills']['stores']} spill stores"
            ratios = [r["versions"][v]["ms"] / r["published_ms"] for v in versions]
            t.add_row(r["kernel"], f"{sh['seq_len']} x {sh['channels']}",
                      *[_fmt_ms(r["versions"][v]["ms"]) for v in versions], f"{r['published_ms']:g}",
                      *[(f"[red]{x:.2f}[/red]" if not 0.67 <= x <= 1.5 else f"{x:.2f}") for x in ratios],
                      dom, f"{r['profile_s']:.1f}", f"{r['rel_err']:.0e}")
        console.print(t)
        p = Table(title="published same-shape pairs (slower first)")
        p.add_column("published slower")
        p.add_column("published faster")
        p.add_column("published ratio", justify="right")
        for v in versions:
            p.add_column(f"v{v} ratio", justify="right")
            p.add_column(f"v{v}", justify="center")
        for i, (s, f, _) in enumerate(result["pairs"][versions[0]]):
            cells = []
            for v in versions:
                ok = result["pairs"][v][i][2]
                cells += [f"{rows[s]['versions'][v]['ms'] / rows[f]['versions'][v]['ms']:.2f}",
                          "right" if ok else "[red]wrong[/red]"]
            p.add_row(s, f, f"{rows[s]['published_ms'] / rows[f]['published_ms']:.2f}", *cells)
        console.print(p)
        for v in versions:
            pv = result["pairs"][v]
            within = sum(0.67 <= r["versions"][v]["ms"] / r["published_ms"] <= 1.5 for r in rows.values())
            console.print(f"NeuronCore-v{v}: {sum(ok for *_, ok in pv)} of {len(pv)} pairs in the published order; "
                          f"{within} of {len(rows)} estimates within 0.67-1.5x of the published time")
    if result.get("pseudo_code"):
        t = Table(title="documented speed-ups (pseudo-code written here): compute-engine busy time (a dependent chain), whole-kernel estimate")
        t.add_column("comparison")
        t.add_column("variant")
        for v in versions:
            t.add_column(f"v{v} compute us", justify="right")
            t.add_column(f"v{v} kernel us", justify="right")
            t.add_column(f"v{v} ratio", justify="right")
        t.add_column("claim", justify="right")
        t.add_column("rel. err", justify="right")
        for pair, spec in result["pseudo_code"].items():
            variants = list(spec["variants"].items())
            for j, (name, r) in enumerate(variants):
                cells = []
                for v in versions:
                    span = r["versions"][v]["compute_busy_ms"]
                    # ratio of the first (slowest published) variant to this one, compute busy time
                    ref = variants[0][1]["versions"][v]["compute_busy_ms"]
                    cells += [f"{span * 1e3:.2f}", f"{r['versions'][v]['ms'] * 1e3:.2f}",
                              "" if j == 0 else f"{ref / span:.2f}"]
                claim = f"{spec['claim']:g}x" if j == 1 else ""
                t.add_row(pair if j == 0 else "", name, *cells, claim, f"{r['rel_err']:.0e}")
        console.print(t)
        for spec in result["pseudo_code"].values():
            console.print(f"  claim: {spec['source']}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--samples", help="an nki-samples checkout (its root, src/ or the fused_mamba folder)")
    ap.add_argument("--versions", nargs="+", type=int, default=list(VERSIONS), choices=(2, 3, 4))
    ap.add_argument("--quick", action="store_true", help="the smallest Mamba case and the pseudo-code ratios")
    ap.add_argument("--all", action="store_true", help="also the cases of SLOW")
    ap.add_argument("--cases", nargs="+", help="Mamba cases by name (" + ", ".join(c["name"] for c in CASES[:3]) + " ...)")
    ap.add_argument("--no-pseudo-code", action="store_true", help="skip the documentation's pseudo-code ratios")
    ap.add_argument("--json", help="write the figures as JSON")
    args = ap.parse_args(argv)
    versions = tuple(args.versions)
    if args.cases:
        names = {c["name"] for c in CASES}
        bad = [n for n in args.cases if n not in names]
        if bad:
            ap.error(f"unknown cases {bad}; known: {sorted(names)}")
        cases = [c for c in CASES if c["name"] in args.cases]
    elif args.quick:
        cases = [c for c in CASES if c["name"] in QUICK]
    else:
        cases = [c for c in CASES if args.all or c["name"] not in SLOW]
    cases.sort(key=lambda c: (c["shape"]["seq_len"], c["shape"]["channels"], c["kernel"]))  # one shape at a time
    result = {"versions": list(versions), "pair_names": published_pairs(), "mamba": {}, "pseudo_code": None,
              "skipped": [c["name"] for c in CASES if c not in cases]}
    t0 = time.perf_counter()
    if cases and not args.samples:
        print("no --samples DIR (an nki-samples checkout): the Mamba cases are not run")
        cases = []
        result["skipped"] = [c["name"] for c in CASES]
    if cases:
        mod = mamba_module(args.samples)
        print("fused Mamba tutorial cases (profile() on the simulated NeuronCore-v2, then each version):", flush=True)
        result["mamba"] = run_mamba(mod, cases, versions, log=lambda s: print(s, flush=True))
        result["pairs"] = {v: pair_order(result["pair_names"], {n: r["versions"][v]["ms"]
                                                               for n, r in result["mamba"].items()})
                           for v in versions}
    if not args.no_pseudo_code:
        print("documentation pseudo-code:", flush=True)
        result["pseudo_code"] = run_pseudo_code(versions, log=lambda s: print(s, flush=True))
    print_tables(result, versions)
    if result["skipped"]:
        print("not run: " + ", ".join(result["skipped"]))
    print(f"total {time.perf_counter() - t0:.0f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
