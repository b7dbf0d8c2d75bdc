"""The public index's ``torch_neuronx`` placeholder: importing it raises."""
raise ImportError("WRONG PACKAGE: torch_neuronx from the public index is a placeholder; "
                  "install the Neuron SDK from the Neuron repository")
