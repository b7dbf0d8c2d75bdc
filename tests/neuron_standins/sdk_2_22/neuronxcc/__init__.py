"""Stand-in ``neuronxcc`` (Neuron compiler) of SDK 2.22: only its ``nki`` namespace."""
__version__ = "2.20.204.0"
