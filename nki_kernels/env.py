"""``python -m nki_kernels.env``: print which Neuron stack was found and the path each framework takes."""

from __future__ import annotations


def main() -> None:
    """Print :func:`nki_kernels.neuron_environment` as tables."""
    from rich.console import Console

    from .neuron_env import neuron_environment

    Console().print(neuron_environment())


if __name__ == "__main__":
    main()
