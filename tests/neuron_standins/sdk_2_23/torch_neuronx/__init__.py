"""Stand-in ``torch_neuronx`` of the torch-xla era (no native device, no nki_op)."""
__version__ = "2.8.0.2.10"
