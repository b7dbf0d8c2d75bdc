"""The public index's ``jax_neuronx`` placeholder: importing it raises."""
raise ImportError("WRONG PACKAGE: jax_neuronx from the public index is a placeholder; "
                  "install the Neuron SDK from the Neuron repository")
