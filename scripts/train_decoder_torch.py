"""Train a small decoder block on the NKI kernel library (torch_ops) next to its plain-torch twin.

    python scripts/train_decoder_torch.py [--steps 30] [--json PATH]

The block is pre-norm: RMSNorm -> causal grouped-query attention
(``torch_ops.flash_attention``; the twin uses
``torch.nn.functional.scaled_dot_product_attention``) -> residual RMSNorm
(``torch_ops.residual_rms_norm``) -> GELU MLP -> residual RMSNorm -> vocabulary
head -> cross-entropy (``torch_ops.CrossEntropyLoss`` against
``torch.nn.CrossEntropyLoss``). The twin's state_dict loads into the NKI model;
both take the same AdamW steps on the same batches of a synthetic next-token
task. The script prints both loss curves and the largest parameter difference,
and exits non-zero when it exceeds float32 tolerance.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

# The simulator's Tensor-engine matmuls are small (<= 128 x 512): BLAS threads only add spin-waiting,
# which costs 100x on a busy machine with few cores.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import torch  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

if __name__ == "__main__":
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import torch_ops  # noqa: E402


def plain_residual_rms_norm(norm):
    """``(norm(x + residual), x + residual)`` with a torch.nn.RMSNorm."""
    def apply(x, residual):
        h = x + residual
        return norm(h), h
    return apply


class DecoderBlock(nn.Module):
    """Embedding, one pre-norm attention + MLP block, final norm and vocabulary head."""

    def __init__(self, library: bool, vocab=300, dim=64, heads=4, kv_heads=2, hidden=128):
        super().__init__()
        self.library, self.heads, self.kv_heads, self.hd = library, heads, kv_heads, dim // heads
        norm = (lambda: torch_ops.RMSNorm(dim, eps=1e-6)) if library else (lambda: nn.RMSNorm(dim, eps=1e-6))
        self.embed = nn.Embedding(vocab, dim)
        self.norm_attn, self.norm_mlp, self.norm_out = norm(), norm(), norm()
        self.wq = nn.Linear(dim, heads * self.hd, bias=False)
        self.wk = nn.Linear(dim, kv_heads * self.hd, bias=False)
        self.wv = nn.Linear(dim, kv_heads * self.hd, bias=False)
        self.wo = nn.Linear(heads * self.hd, dim, bias=False)
        self.up, self.down = nn.Linear(dim, hidden), nn.Linear(hidden, dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def _split(self, t, n):
        b, s, _ = t.shape
        return t.view(b, s, n, self.hd).transpose(1, 2)

    def _residual_norm(self, norm, x, residual):
        if self.library:
            return torch_ops.residual_rms_norm(x, residual, norm.weight, eps=norm.eps)
        return plain_residual_rms_norm(norm)(x, residual)

    def forward(self, tokens):
        x = self.embed(tokens)
        n = self.norm_attn(x)
        q, k, v = self._split(self.wq(n), self.heads), self._split(self.wk(n), self.kv_heads), \
            self._split(self.wv(n), self.kv_heads)
        if self.library:
            o = torch_ops.flash_attention(q, k, v, causal=True)
        else:
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        o = o.transpose(1, 2).reshape(x.shape)
        n2, h = self._residual_norm(self.norm_mlp, self.wo(o), x)
        n3, _ = self._residual_norm(self.norm_out, self.down(F.gelu(self.up(n2))), h)
        return self.head(n3)


def batches(steps, batch, seq, vocab, seed=1):
    """(tokens, targets) of a next-token task: each token's successor is fixed by a random permutation."""
    g = torch.Generator().manual_seed(seed)
    successor = torch.randperm(vocab, generator=g)
    for _ in range(steps):
        seqs = torch.empty(batch, seq + 1, dtype=torch.long)
        seqs[:, 0] = torch.randint(0, vocab, (batch,), generator=g)
        for i in range(seq):
            seqs[:, i + 1] = successor[seqs[:, i]]
        yield seqs[:, :-1], seqs[:, 1:]


def max_param_diff(a: nn.Module, b: nn.Module) -> float:
    """Largest absolute difference between corresponding parameters."""
    return max((p.detach() - q.detach()).abs().max().item() for p, q in zip(a.parameters(), b.parameters()))


def main(argv=None) -> int:
    """Train both models; returns the exit status."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=96, help="tokens per sequence (ragged: not a multiple of 128)")
    ap.add_argument("--vocab", type=int, default=300)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--json", help="write both loss curves to this file")
    # AdamW's first steps move every parameter by about lr whatever the gradient's size, so
    # last-bit gradient differences can show up as parameter differences well above 1e-6.
    ap.add_argument("--tol", type=float, default=1e-3, help="allowed max parameter difference")
    args = ap.parse_args(argv)

    torch.manual_seed(0)
    ref = DecoderBlock(library=False, vocab=args.vocab)
    ours = DecoderBlock(library=True, vocab=args.vocab)
    ours.load_state_dict(ref.state_dict())
    opt_ref = torch.optim.AdamW(ref.parameters(), lr=args.lr)
    opt = torch.optim.AdamW(ours.parameters(), lr=args.lr)
    loss_ref_fn, loss_fn = nn.CrossEntropyLoss(), torch_ops.CrossEntropyLoss()

    curves = {"library": [], "plain": []}
    worst_loss = worst = 0.0
    print(f"{'step':>4} {'loss (NKI library)':>19} {'loss (torch)':>13} {'max|param diff|':>16}")
    for step, (tokens, targets) in enumerate(batches(args.steps, args.batch, args.seq, args.vocab)):
        for model, opt_, fn, curve in ((ref, opt_ref, loss_ref_fn, "plain"), (ours, opt, loss_fn, "library")):
            opt_.zero_grad()
            loss = fn(model(tokens).reshape(-1, args.vocab), targets.reshape(-1))
            loss.backward()
            opt_.step()
            curves[curve].append(loss.item())
        diff = max_param_diff(ref, ours)
        worst = max(worst, diff)
        l_lib, l_ref = curves["library"][-1], curves["plain"][-1]
        worst_loss = max(worst_loss, abs(l_lib - l_ref) / max(abs(l_ref), 1e-12))
        print(f"{step:>4} {l_lib:>19.6f} {l_ref:>13.6f} {diff:>16.2e}", flush=True)

    print(f"max relative loss difference:  {worst_loss:.3e}")
    print(f"max parameter difference:      {worst:.3e}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"framework": "torch", **curves, "max_rel_loss_diff": worst_loss,
                       "max_param_diff": worst}, f, indent=1)
    ok = worst <= args.tol
    print("OK: the NKI-library model tracks the torch model" if ok else f"FAIL: difference above {args.tol}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
