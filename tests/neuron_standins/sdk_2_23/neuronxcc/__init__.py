"""Stand-in ``neuronxcc`` (Neuron compiler) of SDK 2.23: only its ``nki`` namespace."""
__version__ = "2.21.18209.0"
