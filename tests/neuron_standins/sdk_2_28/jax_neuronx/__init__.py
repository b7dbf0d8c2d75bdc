"""Stand-in ``jax_neuronx`` 0.7.0.1.0 (nki_call removed in 2.23)."""
__version__ = "0.7.0.1.0"
