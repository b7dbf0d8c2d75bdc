"""torch-xla tests: run in the torch-xla environment, on the XLA CPU device.

    PJRT_DEVICE=CPU .venv-xla/bin/python -m pytest tests/xla

torch-xla 2.9 pins torch 2.9, so these cannot share the main environment
(torch 2.13 CPU); ``scripts/test.sh`` runs them in ``.venv-xla``. Where torch-xla is
missing, ``tests/conftest.py`` leaves this folder out and says so in the header and the
summary; asked for explicitly there (or with ``NKI_OPS_REQUIRE_XLA=1``), it is an error.
"""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("PJRT_DEVICE", "CPU")

try:
    import torch_xla  # noqa: F401
except ImportError as exc:  # pragma: no cover - wrong environment
    raise pytest.UsageError(
        "tests/xla need torch-xla: run `PJRT_DEVICE=CPU .venv-xla/bin/python -m pytest tests/xla` "
        f"(see scripts/test.sh); import failed with: {exc}"
    ) from None


@pytest.fixture(scope="session")
def xla_device():
    """The torch-xla device (the XLA CPU device under PJRT_DEVICE=CPU)."""
    return torch_xla.device()


@pytest.fixture(autouse=True)
def clean_step():
    """Start and end every test on a step boundary so graphs do not leak between tests."""
    torch_xla.sync()
    yield
    torch_xla.sync()
