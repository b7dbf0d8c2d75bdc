"""Plot the decoder-block loss curves of the training demos side by side (PNG).

    python scripts/train_decoder_jax.py --json /tmp/jax.json
    python scripts/train_decoder_torch.py --json /tmp/torch.json
    python scripts/plot_decoder_losses.py /tmp/jax.json /tmp/torch.json -o docs/decoder_losses.png

One panel per JSON file (written by the demos' ``--json``): the NKI-library
model's loss and the plain-framework model's loss per step, with the largest
relative loss difference in the title.
"""

from __future__ import annotations

import argparse
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(argv=None) -> None:
    """Read the curves and write the figure."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("curves", nargs="+", help="JSON files written by train_decoder_*.py --json")
    ap.add_argument("-o", "--output", default="docs/decoder_losses.png")
    args = ap.parse_args(argv)
    runs = []
    for path in args.curves:
        with open(path) as f:
            runs.append(json.load(f))
    fig, axes = plt.subplots(1, len(runs), figsize=(5.5 * len(runs), 4), squeeze=False)
    for ax, run in zip(axes[0], runs):
        steps = range(len(run["plain"]))
        name = run["framework"] + (f" ({run['devices']} devices)" if run.get("devices", 1) > 1 else "")
        plain = "jnp" if run["framework"] == "jax" else "torch"
        ax.plot(steps, run["plain"], lw=3, alpha=0.5, label=f"plain {plain}")
        ax.plot(steps, run["library"], lw=1.2, ls="--", color="black", label="NKI kernel library")
        ax.set_title(f"{name}: max rel. loss diff {run['max_rel_loss_diff']:.1e}")
        ax.set_xlabel("step")
        ax.set_ylabel("cross-entropy")
        ax.legend()
    fig.suptitle("Decoder block (flash attention, residual RMSNorm, MLP, cross-entropy) on CPU")
    fig.tight_layout()
    fig.savefig(args.output, dpi=110)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
