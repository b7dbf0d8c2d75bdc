"""The public index's ``nki`` placeholder: importing it raises."""
raise ImportError("WRONG PACKAGE: nki from the public index is a placeholder; "
                  "install the Neuron SDK from the Neuron repository")
