"""The public index's ``neuronxcc`` placeholder: importing it raises."""
raise ImportError("WRONG PACKAGE: neuronxcc from the public index is a placeholder; "
                  "install the Neuron SDK from the Neuron repository")
