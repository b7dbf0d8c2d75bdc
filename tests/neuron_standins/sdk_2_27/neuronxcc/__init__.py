"""Stand-in ``neuronxcc`` (Neuron compiler) of SDK 2.27: only its ``nki`` namespace."""
__version__ = "2.22.12471.0"
