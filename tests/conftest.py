"""Suite-wide collection rules.

``tests/xla`` needs torch-xla, which pins its own torch (2.9) and so lives in ``.venv-xla``,
not in ``.venv``. Where torch_xla does not import, plain ``pytest`` leaves that folder out and
says so in the header and the summary (not a collection error, not a silent skip);
``scripts/test.sh`` runs it in ``.venv-xla`` with ``NKI_OPS_REQUIRE_XLA=1``, which turns a
missing torch-xla into an error there instead.
"""

from __future__ import annotations

import importlib.util
import os
import pathlib

import pytest

XLA_DIR = pathlib.Path(__file__).parent / "xla"
_XLA_MISSING = importlib.util.find_spec("torch_xla") is None
_left_out = []


def pytest_ignore_collect(collection_path, config):
    """Leave ``tests/xla`` out where torch-xla is not installed (``.venv``)."""
    if _XLA_MISSING and pathlib.Path(collection_path) == XLA_DIR:
        if os.environ.get("NKI_OPS_REQUIRE_XLA") == "1":
            raise pytest.UsageError("NKI_OPS_REQUIRE_XLA=1 but torch_xla does not import here: run tests/xla "
                                    "with .venv-xla/bin/python (scripts/test.sh does)")
        _left_out.append(collection_path)
        return True
    return None


def pytest_report_header(config):
    """Say up front when the torch-xla tests are left out."""
    if _XLA_MISSING:
        return [("tests/xla: left out, torch-xla is not installed in this environment "
                 "(scripts/test.sh runs them in .venv-xla)")]
    return []


def pytest_terminal_summary(terminalreporter):
    """Repeat it under the results, where a reader looks for what did not run."""
    if _left_out:
        files = sorted(p.name for p in XLA_DIR.glob("test_*.py"))
        terminalreporter.write_sep("-", "torch-xla tests not run here")
        terminalreporter.write_line(f"deselected tests/xla ({len(files)} files): torch-xla is not installed in this "
                                    "environment; scripts/test.sh runs them in .venv-xla")
