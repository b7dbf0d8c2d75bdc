"""Hooks for the checks that need to see the loop structure of a kernel."""

from __future__ import annotations


def loop_iter(r: range, kind: str):
    """Iterate an NKI loop range (``affine``/``sequential``/``static``)."""
    return iter(r)
