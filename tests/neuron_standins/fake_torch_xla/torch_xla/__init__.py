"""Stand-in ``torch_xla``: only importable (tests make XLA-like tensors themselves)."""
__version__ = "2.8.0"
