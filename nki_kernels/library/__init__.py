"""The nki-ops kernel library: training kernels written in the official NKI language.

One module per op, each with its forward and backward kernels (fp32 statistics,
bf16 / fp32 inputs, any shape): ``softmax``, ``cross_entropy``,
``residual_rms_norm``, ``flash_attention``.
"""
