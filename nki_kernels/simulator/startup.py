"""``NKI_SIMULATOR=1``: ``@nki.jit`` kernels of unmodified scripts run on the simulator.

The official simulator guide: "Set this environment variable and run your existing
framework code with NKI kernel calls with zero code changes -- every ``@nki.jit``
kernel automatically runs on the simulator". Here that takes an interpreter
start-up hook, because nothing of ``nki_kernels`` runs before the script's own
``import nki``: a ``.pth`` file in site-packages whose one line, when ``NKI_SIMULATOR`` is set,
arms a finder (:mod:`nki_ops.simulator_hook`) that runs
:func:`~nki_kernels.simulator.install` at the script's first ``import nki`` /
``import neuronxcc`` (and does nothing else, so interpreters without the variable
do not even import NumPy). :func:`activate` installs at once; ``install()``, which registers the simulator as
``nki`` / ``neuronxcc.nki`` unless the genuine packages import (those have their
own ``NKI_SIMULATOR`` switch). Every nki-ops wheel carries the hook
(``pip install`` of the project or of its wheel, editable installs too: the build backend
``_build/nki_ops_build.py`` adds it); for another site-packages, write it with::

    python -m nki_kernels.simulator.startup [SITE_DIR]    # writes nki_ops_simulator.pth there

Kernels called on NumPy arrays, torch CPU tensors or JAX arrays then run on the
simulator (torch / JAX through ``torch_ops`` / ``jax_ops``).
"""

from __future__ import annotations

import sys
import sysconfig
from pathlib import Path

# The hook's line and its lazy finder live in the light nki_ops package (importing anything under
# nki_kernels imports all of it): with the variable set, the simulator is installed at the script's
# first `import nki` / `import neuronxcc`, not at interpreter start-up. Re-exported: this module's API.
from nki_ops.simulator_hook import HOOK_LINE, HOOK_NAME, enabled
from .install import install


def activate(environ=None) -> bool:
    """Register the simulator as ``nki`` / ``neuronxcc.nki`` when ``NKI_SIMULATOR`` is set; True if it did."""
    if not enabled(environ):
        return False

    install()
    return True


def write_hook(site_dir=None) -> Path:
    """Write the start-up hook (``nki_ops_simulator.pth``) into ``site_dir`` (default: this
    interpreter's site-packages) and return its path."""
    target = Path(site_dir if site_dir is not None else sysconfig.get_paths()["purelib"]) / HOOK_NAME
    target.write_text(HOOK_LINE)
    return target


if __name__ == "__main__":
    where = sys.argv[1] if len(sys.argv) > 1 else None
    print(f"wrote {write_hook(where)}; NKI_SIMULATOR=1 now runs @nki.jit kernels on the simulator")
