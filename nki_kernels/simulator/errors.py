"""The one exception the simulator raises for NKI rule violations, with the kernel line."""

from __future__ import annotations

import os
import sys

_SIM_DIR = os.path.dirname(os.path.abspath(__file__))


class NKIError(ValueError):
    """A kernel broke a rule the Neuron compiler or the hardware enforces.

    The message names the rule, the offending shape or value, and the kernel
    source line (``file:line``) where the violating call was made.
    """

    def __init__(self, rule: str, detail: str, where: str | None = None):
        self.rule = rule
        self.detail = detail
        self.where = where if where is not None else kernel_location()
        super().__init__(f"[{rule}] {detail} (at {self.where})")


def kernel_location() -> str:
    """``file:line`` of the innermost frame outside the simulator package (the kernel's line)."""
    frame = sys._getframe(1)
    while frame is not None:
        fname = os.path.abspath(frame.f_code.co_filename)
        if not fname.startswith(_SIM_DIR):
            return f"{frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}"
        frame = frame.f_back
    return "<unknown>"
