"""PEP 517 build backend of nki-ops: setuptools', plus the ``NKI_SIMULATOR`` start-up hook.

Every wheel it builds (``pip install .``, ``pip wheel .``, ``pip install -e .``) carries
``nki_ops_simulator.pth`` at its root, so the installer puts it into site-packages and the
interpreter runs its one line at start-up. The line (``HOOK_LINE`` of
``nki_ops/simulator_hook.py``, read from the source tree so there is one copy) reads one
environment variable and imports nothing unless ``NKI_SIMULATOR`` is set.

setuptools has no option for a file at the wheel's root outside a package (``data_files`` land
under ``sys.prefix``, not site-packages, and PEP 660 editable wheels drop ``build_py`` extras), so
the hook is added to the finished wheel here, with its line in the wheel's ``RECORD``.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import os
import zipfile

from setuptools import build_meta as _setuptools
# Every other PEP 517 hook (sdist, metadata, requirements) is setuptools' own.
from setuptools.build_meta import *

HOOK_NAME = "nki_ops_simulator.pth"
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _hook_line() -> bytes:
    path = os.path.join(_ROOT, "nki_ops", "simulator_hook.py")
    spec = importlib.util.spec_from_file_location("_nki_ops_simulator_hook", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # the hook module imports only the standard library
    return module.HOOK_LINE.encode()


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}\n"


def add_hook(wheel_path: str) -> None:
    """Rewrite the wheel at ``wheel_path`` with the start-up hook at its root and in its RECORD."""
    data = _hook_line()
    tmp = wheel_path + ".tmp"
    with zipfile.ZipFile(wheel_path) as src, zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as dst:
        record = next(n for n in src.namelist() if n.endswith(".dist-info/RECORD"))
        for info in src.infolist():
            if info.filename == HOOK_NAME:
                continue
            body = src.read(info.filename)
            if info.filename == record:
                lines = [ln for ln in body.decode().splitlines(keepends=True) if not ln.startswith(HOOK_NAME + ",")]
                body = "".join([_record_line(HOOK_NAME, data), *lines]).encode()
            dst.writestr(info, body)
        dst.writestr(HOOK_NAME, data)
    os.replace(tmp, wheel_path)


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    """setuptools' wheel, with the start-up hook added."""
    name = _setuptools.build_wheel(wheel_directory, config_settings, metadata_directory)
    add_hook(os.path.join(wheel_directory, name))
    return name


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    """setuptools' editable wheel, with the start-up hook added."""
    name = _setuptools.build_editable(wheel_directory, config_settings, metadata_directory)
    add_hook(os.path.join(wheel_directory, name))
    return name
