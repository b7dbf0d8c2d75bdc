"""Documented NeuronCore facts the timing model runs on, one table per NeuronCore version.

Every number is a :class:`Fact` that carries the page it comes from (``source``: a URL, the
rendered documentation page where one exists and the pinned source file of that page in
``aws-neuron/aws-neuron-sdk``) and a short quote. No number here was fitted to a published
latency. Where the documentation gives nothing, the fact says so in ``assumption`` (why it is
needed and why this value); there are few of those, and ``assumptions()`` lists them.

Versions: NeuronCore-v2 (trn1 / inf2), v3 (trn2), v4 (trn3). ``core(version)`` accepts 2, 3, 4,
``"v3"``, ``"trn2"``, ``"inf2"`` ... (the names the simulator's ``NKI_SIM_NC_VERSION`` and
``NEURON_PLATFORM_TARGET_OVERRIDE`` use).

The cost formulas that use these facts are in :mod:`.costs`.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

# Pinned sources. The rendered pages move between releases; the SDK repository pins the text.
_SDK = "https://github.com/aws-neuron/aws-neuron-sdk/blob/81ce03ae261e12925e53437a0f690478e6366155/"
_RTD = "https://awsdocs-neuron.readthedocs-hosted.com/en/latest/"
ARCH_V2 = (_RTD + "nki/arch/trainium_inferentia2_arch.html | "
           + _SDK + "nki/guides/architecture/trainium_inferentia2_arch.rst")
ARCH_V3 = ("https://awsdocs-neuron.readthedocs-hosted.com/en/v2.29.0/_sources/nki/guides/architecture/"
           "trainium2_arch.rst | " + _SDK + "nki/guides/architecture/trainium2_arch.rst")
ARCH_V4 = _RTD + "nki/about/trainium3_arch.html | " + _SDK + "nki/guides/architecture/trainium3_arch.rst"
DMA_OVERVIEW = _RTD + "nki/about/nki-dma-overview.html | " + _SDK + "nki/get-started/about/nki-dma-overview.rst"
DMA_BW_GUIDE = (_RTD + "_sources/nki/deep-dives/nki-dma-bandwidth-guide.rst | "
                + _SDK + "nki/deep-dives/nki-dma-bandwidth-guide.rst")
PERF_GUIDE = _SDK + "nki/deep-dives/nki_perf_guide.rst"
DGE_PAGE = _RTD + "nki/deep-dives/nki-dge.html | " + _SDK + "nki/deep-dives/nki-dge.rst"
# The nki.isa API pages carried "Estimated instruction cost" sections until late 2025; this is the
# source of those pages at the last commit that has them (rendered as
# .../general/nki/api/generated/nki.isa.<name>.html, "relevant for: Inf2, Trn1, Trn2").
ISA_PAGES = ("https://github.com/aws-neuron/aws-neuron-sdk/blob/1db4d74ec718b8c3287ad118ad021c95c64ff455/"
             "nki/api/nki/isa/__init__.py")


COMPUTE = ("Tensor", "Vector", "Scalar", "GpSimd")  # the compute engines of NeuronCore-v2..v4


@dataclass(frozen=True)
class Fact:
    """One documented number: ``value`` in ``unit``, its ``source`` page and a ``quote`` from it.

    ``assumption`` is empty for a documented fact; otherwise it says why the model needs a value
    the pages do not give and why this one.
    """

    value: float
    unit: str
    source: str
    quote: str
    assumption: str = ""


def _f(value, unit, source, quote, assumption=""):
    return Fact(float(value), unit, source, quote, assumption)


@dataclass(frozen=True)
class NeuronCore:
    """The facts of one NeuronCore version (see the module docstring for the sources)."""

    version: int
    name: str
    # engine clocks (Hz)
    tensor_hz: Fact
    vector_hz: Fact
    scalar_hz: Fact
    gpsimd_hz: Fact
    # Tensor engine
    mm_init_latency: Fact        # cycles: matmul issue interval is max(N, this)
    fp32_matmul_factor: Fact     # fp32 inputs cost this many times the bf16 cycles
    # Vector / Scalar / GpSimd
    min_ii: Fact                 # cycles: minimum initiation interval for small tiles
    static_overhead: Fact        # cycles added when an instruction waits on its input's producer
    gpsimd_start: Fact           # cycles: GpSimd instruction start-up
    vector_perf_mode: Fact       # 1 = no BF16/FP16 performance mode, else its top speed-up
    scalar_perf_mode: Fact       # likewise for ScalarE tensor_scalar / tensor_copy
    strided_factor: Fact         # cost factor when the innermost stride exceeds 16 bytes
    shared_ports: Fact           # 1: Vector/GpSimd share the SBUF port and Vector/Scalar the PSUM port
    # DMA
    dma_engines: Fact
    dma_queues: Fact
    dma_partitions_per_engine: Fact
    dma_engine_bw: Fact          # bytes/s per DMA engine
    dma_fixed: Fact              # s per DMA transfer (descriptor, sync, semaphore-to-start)
    hwdge_issue: Fact            # s per hardware-DGE DMA instruction on its issuing queue
    hbm_bw_core: Fact            # bytes/s of device HBM per NeuronCore
    dma_rmw_efficiency: Fact     # DMA accumulate (dst_rmw_op=add) throughput / copy throughput
    dma_transpose_efficiency: Fact
    # thresholds of the efficiency report (not used for timing)
    efficient_transfer_bytes: Fact
    efficient_partition_bytes: Fact
    saturating_partition_bytes: Fact
    # on-chip memory
    partitions: Fact
    sbuf_partition_bytes: Fact
    psum_partition_bytes: Fact
    psum_banks: Fact

    def clock(self, engine: str) -> float:
        """Clock of ``engine`` ("Tensor", "Vector", "Scalar", "GpSimd") in Hz."""
        return {"Tensor": self.tensor_hz, "Vector": self.vector_hz, "Scalar": self.scalar_hz,
                "GpSimd": self.gpsimd_hz}[engine].value

    def facts(self) -> dict:
        """Every fact of this version by field name."""
        return {f.name: getattr(self, f.name) for f in fields(self) if isinstance(getattr(self, f.name), Fact)}

    def assumptions(self) -> dict:
        """The facts the documentation does not give (each says why in ``assumption``)."""
        return {k: v for k, v in self.facts().items() if v.assumption}


# ---------------------------------------------------------------------------------------------
# Facts shared by the versions (the pages say "NeuronCore (v2-v4)" or give no version).

_MIN_II = _f(64, "cycles", ISA_PAGES,
             "nki.isa.tensor_scalar: ``max(MIN_II, N)`` Vector or Scalar Engine cycles ... ``MIN_II`` is roughly "
             "64 engine cycles.")
_STATIC = _f(100, "cycles", ARCH_V2,
             "In the rare cases where VectorE is running many back-to-back instructions either with ``N << 128`` "
             "or with every instruction depending on the output tile of the previous instruction, we need to add "
             "a static instruction overhead of 100 engine cycles")
_GPSIMD_START = _f(150, "cycles", ISA_PAGES,
                   "nki.isa.affine_select: ``GPSIMD_START + N`` GpSimd Engine cycles ... ``GPSIMD_START`` is the "
                   "instruction startup overhead on GpSimdE, roughly 150 engine cycles.")
_DMA_ENGINES = _f(16, "engines", DMA_OVERVIEW, "Each NeuronCore (v2-v4) is paired with 16 DMA engines.")
_DMA_QUEUES = _f(16, "queues per engine", DMA_OVERVIEW,
                 "There are 16 DMA queues per DMA engine (ID 0-15). ... DMA transfers within a queue on the same "
                 "DMA engine are executed in order.")
_DMA_PPE = _f(8, "partitions", DMA_OVERVIEW,
              "Given 16x DMA engines and 128 SBUF partitions, each DMA engine is typically responsible for moving "
              "data for eight SBUF partitions (128 partitions / 16 DMA engines).")
_DMA_FIXED = _f(1300e-9, "s", DMA_BW_GUIDE,
                "every DMA transfer incurs descriptor setup, synchronization, and semaphore-to-start latency "
                "(~1300 ns cross-engine). When payloads are small, the engines spend more time on overhead than on "
                "data movement, and the DMA packet rate---not HBM bandwidth---becomes the limiting factor.")
_EFF_TRANSFER = _f(32 * 1024, "bytes", PERF_GUIDE,
                   "For reference, the transfer size on Trainium/Inferential2 should be larger than 32KiB to "
                   "achieve ideal bandwidth.")
_EFF_PARTITION = _f(2048, "bytes", DMA_BW_GUIDE,
                    ">= 2 KiB per partition (minimum recommended): Approaches peak bandwidth.")
_SAT_PARTITION = _f(4096, "bytes", DMA_BW_GUIDE,
                    ">= 4 KiB per partition (target for full saturation): Fully amortizes per-packet overhead and "
                    "saturates the DMA engines.")
_PARTITIONS = _f(128, "partitions", ARCH_V2, "Both SBUF and PSUM are considered two-dimensional memories with 128 "
                 "partitions each")
_PSUM = _f(16 * 1024, "bytes", ARCH_V2, "one PSUM partition has 16KiB")
_PSUM_BANKS = _f(8, "banks", ARCH_V2,
                 "Each partition is further divided into 8 PSUM banks, with each bank holding up to 512 32-bit "
                 "values. ... TensorE can have up to eight outstanding matmul accumulation groups")
_HWDGE = _f(600e-9, "s", DGE_PAGE, "Each hardware-DGE DMA instruction takes approximately **600 ns** to execute.")
_STRIDED_V2 = _f(2, "x", ARCH_V2,
                 "If the most-minor F dimension stride exceeds 16 bytes, the achievable bandwidth of each tensor "
                 "read/write interface will be half of the peak bandwidth, which translates to roughly 50% "
                 "performance hit on the instructions.")
_NO_PERF_MODE = _f(1, "x", ARCH_V3, "NeuronCore-v3 Vector Engine provides a new performance mode BF16/FP16 data "
                   "types, which quadruples or doubles the instruction throughput ... compared to NeuronCore-v2")

_STRIDED_LATER = _f(2, "x", ARCH_V2, _STRIDED_V2.quote, assumption="stated for NeuronCore-v2 only; the "
                    "v3/v4 guides say nothing of strided access, so the v2 penalty is kept")
_PORTS_LIFTED = _f(0, "bool", ARCH_V3, "In NeuronCore-v3, two restrictions in engine parallel accesses to "
                   "SBUF/PSUM are lifted ... VectorE and GpSimdE can access SBUF in parallel ... VectorE and ScalarE "
                   "can access PSUM in parallel.")

V2 = NeuronCore(
    version=2, name="NeuronCore-v2 (trn1, inf2)",
    tensor_hz=_f(2.8e9, "Hz", ARCH_V2, "Trainium/Inferentia2 | Tensor | 2x128 (input); 1x128 (output) | 2.8"),
    vector_hz=_f(1.12e9, "Hz", ARCH_V2, "Trainium/Inferentia2 | Vector | 128 input/output | 1.12"),
    scalar_hz=_f(1.4e9, "Hz", ARCH_V2, "Trainium/Inferentia2 | Scalar | 128 input/output | 1.4"),
    gpsimd_hz=_f(1.4e9, "Hz", ARCH_V2, "Trainium/Inferentia2 | GpSimd | 128 input/output | 1.4"),
    mm_init_latency=_f(64, "cycles", ARCH_V2,
                       "The initiation interval between subsequent MM instructions in this case is roughly "
                       "``max(N, MM_INIT_LATENCY)``, where ``MM_INIT_LATENCY`` is 64 TensorE cycles on "
                       "NeuronCore-v2"),
    fp32_matmul_factor=_f(4, "x", ARCH_V2, "For FP32 input data type, the instruction cost is roughly 4x higher "
                          "than BF16/FP16/TF32/cFP8."),
    min_ii=_MIN_II, static_overhead=_STATIC, gpsimd_start=_GPSIMD_START,
    vector_perf_mode=_NO_PERF_MODE, scalar_perf_mode=_NO_PERF_MODE, strided_factor=_STRIDED_V2,
    shared_ports=_f(1, "bool", ARCH_V2, "Vector Engine and GpSimd Engine cannot access SBUF in parallel ... "
                    "Vector Engine and Scalar Engine cannot access PSUM in parallel"),
    dma_engines=_DMA_ENGINES, dma_queues=_DMA_QUEUES, dma_partitions_per_engine=_DMA_PPE,
    # The pages disagree: the NKI architecture guide says "a peak bandwidth of 27 GiB/s" per engine and the
    # DMA overview's prose "27.2 GB/s for NeuronCore-v2 and -v3", while the overview's and the bandwidth
    # guide's tables give 17 / 23 / 33 B/ns per engine. The tables win: the overview's own trn2 profile moves
    # 32 KiB on one engine in 1416 ns (23.1 B/ns), the table's trn2 figure.
    dma_engine_bw=_f(17e9, "B/s", DMA_OVERVIEW + " | " + DMA_BW_GUIDE,
                     "Trainium1 | 17 B/ns | 16 | 272 GB/s"),
    dma_fixed=_DMA_FIXED,
    hwdge_issue=_f(0, "s", DGE_PAGE,
                   "``hwdge`` --- hardware DGE | Min HW: NeuronCore-v3+ ... ``none`` --- pre-computed descriptors "
                   "in HBM ... zero on-device overhead"),
    hbm_bw_core=_f(820e9 / 2, "B/s", ARCH_V2, "2 NeuronCores (v2). 2 HBM stacks with a total device memory "
                   "capacity of 32GiB and bandwidth of 820 GB/s."),
    dma_rmw_efficiency=_f(0.5, "x", ARCH_V4, "This near-memory accumulation maintains the same throughput as "
                          "standard DMA copy operations to SBUF (compared to 50% DMA throughput via DMA collective "
                          "compute engines prior to NeuronCore-v4)"),
    dma_transpose_efficiency=_f(0.9, "x", ARCH_V3, "DMA transpose on Trainium2 can achieve up to 90% DMA "
                                "throughput utilization", assumption="no figure for NeuronCore-v2; the trn2 "
                                "figure is used (the perf guide only says DMA transposes 'degrade DMA "
                                "bandwidth significantly' on trn1)"),
    efficient_transfer_bytes=_EFF_TRANSFER, efficient_partition_bytes=_EFF_PARTITION,
    saturating_partition_bytes=_SAT_PARTITION,
    partitions=_PARTITIONS,
    sbuf_partition_bytes=_f(192 * 1024, "bytes", ARCH_V2, "a 24MiB SBUF ... one SBUF partitions has 192KiB"),
    psum_partition_bytes=_PSUM, psum_banks=_PSUM_BANKS,
)

V3 = NeuronCore(
    version=3, name="NeuronCore-v3 (trn2)",
    tensor_hz=_f(2.4e9, "Hz", ARCH_V3, "Trainium2 | Tensor | ... 2x128 (dense BF16/FP16 input) ... | 2.4"),
    vector_hz=_f(0.96e9, "Hz", ARCH_V3, "Vector | 512 BF16/FP16 input/output; 256 input/output for other data "
                 "types | 0.96"),
    scalar_hz=_f(1.2e9, "Hz", ARCH_V3, "Scalar | 128 input/output | 1.2"),
    gpsimd_hz=_f(1.2e9, "Hz", ARCH_V3, "GpSimd | | 1.2"),
    mm_init_latency=_f(64, "cycles", ARCH_V2, "``MM_INIT_LATENCY`` is 64 TensorE cycles on NeuronCore-v2",
                       assumption="no figure for NeuronCore-v3; the v2 cycle count is kept (the trn2 guide "
                       "describes the same LoadStationary/MultiplyMoving pipeline)"),
    fp32_matmul_factor=_f(4, "x", ARCH_V3, "A NeuronCore-v3 Tensor Engine delivers 158 FP8, 79 BF16/FP16/TF32 "
                          "and 20 FP32 dense TFLOPS"),
    min_ii=_MIN_II, static_overhead=_STATIC, gpsimd_start=_GPSIMD_START,
    vector_perf_mode=_f(4, "x", ARCH_V3, "the following instructions could see a 4x throughput lift compared to "
                        "NeuronCore-v2: nisa.tensor_copy and nisa.tensor_scalar when both input/output tensors: "
                        "are in SBUF, are in BF16/FP16, have physically contiguous elements"),
    scalar_perf_mode=_NO_PERF_MODE, strided_factor=_STRIDED_LATER, shared_ports=_PORTS_LIFTED,
    dma_engines=_DMA_ENGINES, dma_queues=_DMA_QUEUES, dma_partitions_per_engine=_DMA_PPE,
    dma_engine_bw=_f(23e9, "B/s", DMA_OVERVIEW + " | " + DMA_BW_GUIDE, "Trainium2 | 23 B/ns | 16 | 368 GB/s"),
    dma_fixed=_DMA_FIXED, hwdge_issue=_HWDGE,
    hbm_bw_core=_f(3e12 / 8, "B/s", ARCH_V3, "8 NeuronCores (v3). 4 HBM stacks with a total device memory "
                   "capacity of 96GiB and bandwidth of 3TB/s."),
    dma_rmw_efficiency=_f(0.5, "x", ARCH_V4, "compared to 50% DMA throughput via DMA collective compute engines "
                          "prior to NeuronCore-v4"),
    dma_transpose_efficiency=_f(0.9, "x", ARCH_V3, "DMA transpose on Trainium2 can achieve up to 90% DMA "
                                "throughput utilization"),
    efficient_transfer_bytes=_EFF_TRANSFER, efficient_partition_bytes=_EFF_PARTITION,
    saturating_partition_bytes=_SAT_PARTITION,
    partitions=_PARTITIONS,
    sbuf_partition_bytes=_f(224 * 1024, "bytes", ARCH_V3, "NeuronCore-v3 SBUF capacity is **28MiB** (or, 128 "
                            "partitions of 224KiB)"),
    psum_partition_bytes=_PSUM, psum_banks=_PSUM_BANKS,
)

V4 = NeuronCore(
    version=4, name="NeuronCore-v4 (trn3)",
    tensor_hz=_f(2.4e9, "Hz", ARCH_V4, "Trainium3 | Tensor | ... 2x128 (non-MXFP8 dense input) ... | 2.4"),
    vector_hz=_f(1.2e9, "Hz", ARCH_V4, "Vector | 512 BF16/FP16/FP8 input/output; 256 input/output for other data "
                 "types | 1.2"),
    scalar_hz=_f(1.2e9, "Hz", ARCH_V4, "Scalar | 256 BF16/FP16/FP8 input/output; 128 input/output for other "
                 "data types | 1.2"),
    gpsimd_hz=_f(1.2e9, "Hz", ARCH_V4, "GpSimd | 128 input/output for all data types | 1.2"),
    mm_init_latency=_f(64, "cycles", ARCH_V2, "``MM_INIT_LATENCY`` is 64 TensorE cycles on NeuronCore-v2",
                       assumption="no figure for NeuronCore-v4; the v2 cycle count is kept"),
    fp32_matmul_factor=_f(4, "x", ARCH_V4, "a NeuronCore-v4 Tensor Engine also delivers 79 BF16/FP16/TF32 and "
                          "20 FP32 TFLOPS"),
    min_ii=_MIN_II, static_overhead=_STATIC, gpsimd_start=_GPSIMD_START,
    vector_perf_mode=_f(4, "x", ARCH_V3, "4x throughput lift compared to NeuronCore-v2: nisa.tensor_copy and "
                        "nisa.tensor_scalar ... in SBUF ... BF16/FP16 ... contiguous",
                        assumption="the trn3 guide gives the Vector width (512 BF16 elements/cycle, as trn2) but "
                        "not the rules; the trn2 rules are kept"),
    scalar_perf_mode=_f(2, "x", ARCH_V4, "The Trainium3 ScalarE now natively supports the tensor_scalar and "
                        "tensor_copy instructions ... and offers up to 2x performance uplift for BF16/FP16 "
                        "datatypes"),
    strided_factor=_STRIDED_LATER, shared_ports=_PORTS_LIFTED,
    dma_engines=_DMA_ENGINES, dma_queues=_DMA_QUEUES, dma_partitions_per_engine=_DMA_PPE,
    dma_engine_bw=_f(33e9, "B/s", DMA_OVERVIEW + " | " + DMA_BW_GUIDE, "Trainium3 | 33 B/ns | 16 | 528 GB/s"),
    dma_fixed=_DMA_FIXED, hwdge_issue=_HWDGE,
    hbm_bw_core=_f(4.7e12 / 8, "B/s", ARCH_V4, "8 NeuronCores (v4). 4 HBM stacks with a total device memory "
                   "capacity of 144 GiB and bandwidth of 4.7 TB/s."),
    dma_rmw_efficiency=_f(1.0, "x", ARCH_V4, "This near-memory accumulation maintains the same throughput as "
                          "standard DMA copy operations to SBUF"),
    dma_transpose_efficiency=_f(0.9, "x", ARCH_V3, "DMA transpose on Trainium2 can achieve up to 90% DMA "
                                "throughput utilization", assumption="no figure for NeuronCore-v4; trn2's"),
    efficient_transfer_bytes=_EFF_TRANSFER, efficient_partition_bytes=_EFF_PARTITION,
    saturating_partition_bytes=_SAT_PARTITION,
    partitions=_PARTITIONS,
    sbuf_partition_bytes=_f(256 * 1024, "bytes", ARCH_V4, "The NeuronCore-v4 SBUF capacity is 32 MiB (up from 28 "
                            "MiB in NeuronCore-v3)"),
    psum_partition_bytes=_f(16 * 1024, "bytes", ARCH_V4, "while the PSUM capacity remains the same at 2 MiB"),
    psum_banks=_PSUM_BANKS,
)

VERSIONS = {2: V2, 3: V3, 4: V4}
_ALIASES = {"v2": 2, "trn1": 2, "inf2": 2, "gen2": 2, "v3": 3, "trn2": 3, "gen3": 3, "v4": 4, "trn3": 4,
            "gen4": 4}


def core(version=2) -> NeuronCore:
    """The :class:`NeuronCore` facts of ``version``: 2/3/4, ``"v3"``, ``"trn2"``, ``"inf2"``, or a NeuronCore."""
    if isinstance(version, NeuronCore):
        return version
    if isinstance(version, str):
        key = version.strip().lower()
        version = _ALIASES.get(key, int(key) if key.isdigit() else key)
    try:
        return VERSIONS[version]
    except KeyError:
        raise ValueError(f"unknown NeuronCore version {version!r}: use 2 (trn1/inf2), 3 (trn2) or 4 (trn3)") from None
