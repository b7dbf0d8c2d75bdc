"""Train a small model built on torch_ops.RMSNorm and torch_ops.add next to its plain-torch twin.

    python scripts/torch_train.py [--steps 40] [--device cpu|xla] [--show-hlo]

Both models start from the same weights (the plain model's state_dict loads
into the NKI one: torch_ops.RMSNorm is state_dict compatible with
torch.nn.RMSNorm) and take the same AdamW steps on the same batches. Each step
prints both losses and the largest parameter difference between the two
models, which must stay within float32 tolerance; the exit status is 1 if it
does not.

``--device xla`` runs the NKI model on torch-xla (``PJRT_DEVICE=CPU`` works):
every kernel launch is an ``AwsNeuronCustomNativeKernel`` custom-call in the
step's graph, valued by the simulator off Neuron; ``--show-hlo`` prints the
custom-calls of the first step's graph, and ``NEURON_FRAMEWORK_DEBUG=1`` writes
the step graph as a ``.pbtxt`` into the working directory.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch
from torch import nn

import torch_ops


class Block(nn.Module):
    """Pre-norm residual MLP block: ``h + W2 gelu(W1 norm(h))``."""

    def __init__(self, d: int, hidden: int, norm, add):
        super().__init__()
        self.norm = norm(d)
        self.up = nn.Linear(d, hidden)
        self.down = nn.Linear(hidden, d)
        self.add = add

    def forward(self, h):
        return self.add(h, self.down(nn.functional.gelu(self.up(self.norm(h)))))


class Net(nn.Module):
    """Embedding -> residual blocks -> final norm -> linear head; the norm and add are pluggable."""

    def __init__(self, norm, add, d=64, hidden=192, blocks=2, features=24, classes=10):
        super().__init__()
        self.inp = nn.Linear(features, d)
        self.blocks = nn.ModuleList(Block(d, hidden, norm, add) for _ in range(blocks))
        self.norm = norm(d)
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        h = self.inp(x)
        for b in self.blocks:
            h = b(h)
        return self.head(self.norm(h))


def plain_net():
    """The reference: torch.nn.RMSNorm (eps 1e-6) and ``+``."""
    return Net(lambda d: nn.RMSNorm(d, eps=1e-6), lambda a, b: a + b)


def nki_net():
    """The same network on the NKI kernels."""
    return Net(lambda d: torch_ops.RMSNorm(d, eps=1e-6), torch_ops.add)


def batches(steps: int, batch: int, features: int = 24, classes: int = 10, seed: int = 0):
    """A fixed synthetic classification task: labels from a random linear teacher."""
    g = torch.Generator().manual_seed(seed)
    teacher = torch.randn(features, classes, generator=g)
    for _ in range(steps):
        x = torch.randn(batch, features, generator=g)
        yield x, (x @ teacher).argmax(-1)


def max_param_diff(a: nn.Module, b: nn.Module) -> float:
    """Largest absolute difference between corresponding parameters."""
    return max((p.detach().cpu() - q.detach().cpu()).abs().max().item()
               for p, q in zip(a.parameters(), b.parameters()))


def main() -> int:
    """Train both models; returns the exit status."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--batch", type=int, default=200, help="rows per batch (not a multiple of 128 on purpose)")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--device", choices=["cpu", "xla"], default="cpu")
    ap.add_argument("--show-hlo", action="store_true", help="print the custom-calls of the first step (xla)")
    # AdamW's first steps move every parameter by about lr whatever the gradient's size, so
    # last-bit gradient differences can show up as parameter differences well above 1e-6.
    ap.add_argument("--tol", type=float, default=1e-3, help="allowed max parameter difference")
    args = ap.parse_args()

    if args.device == "xla":
        os.environ.setdefault("PJRT_DEVICE", "CPU")
        import torch_xla

        device, sync = torch_xla.device(), torch_xla.sync
    else:
        device, sync = torch.device("cpu"), (lambda: None)

    torch.manual_seed(0)
    ref = plain_net()
    ours = nki_net()
    ours.load_state_dict(ref.state_dict())
    # Both on the same device: any difference then comes from the NKI kernels alone.
    ref.to(device)
    ours.to(device)
    opt_ref = torch.optim.AdamW(ref.parameters(), lr=args.lr)
    opt = torch.optim.AdamW(ours.parameters(), lr=args.lr)
    loss_fn = nn.CrossEntropyLoss()

    print(f"device={device}  steps={args.steps}  batch={args.batch}  (NKI kernels on the simulator"
          f"{' behind AwsNeuronCustomNativeKernel custom-calls' if args.device == 'xla' else ''})")
    print(f"{'step':>4} {'loss nki':>10} {'loss torch':>11} {'max|param diff|':>16}")
    worst = 0.0
    for step, (x, y) in enumerate(batches(args.steps, args.batch)):
        x, y = x.to(device), y.to(device)
        opt_ref.zero_grad()
        loss_ref = loss_fn(ref(x), y)
        loss_ref.backward()
        opt_ref.step()

        opt.zero_grad()
        loss = loss_fn(ours(x), y)
        loss.backward()
        opt.step()
        if step == 0 and args.show_hlo and args.device == "xla":
            show_custom_calls(ours)
        sync()  # one step: both models' graphs execute together

        diff = max_param_diff(ref, ours)
        worst = max(worst, diff)
        print(f"{step:>4} {loss.item():>10.5f} {loss_ref.item():>11.5f} {diff:>16.2e}", flush=True)

    ok = worst <= args.tol
    print(f"max parameter difference over the run: {worst:.2e} ({'within' if ok else 'OUTSIDE'} {args.tol:g})")
    return 0 if ok else 1


def show_custom_calls(model: nn.Module) -> None:
    """Print each custom-call of the pending step (the updated parameters' graph) with its kernel."""
    from nki_kernels.custom_call import decode_payload
    from torch_ops.hlo_view import custom_calls

    hlo = torch_ops.neuron_hlo([p for p in model.parameters()])
    print("custom-calls in the first step's graph, as the Neuron compiler would get them:")
    for cc in custom_calls(hlo):
        payload = decode_payload(cc["backend_config"])
        k = payload["kernel"]
        print(f"  {cc['name']}: {k['module']}.{k['qualname']} grid={tuple(payload['grid'])} "
              f"({', '.join(cc['operand_types'])}) -> {cc['result_type']}")


if __name__ == "__main__":
    sys.exit(main())
