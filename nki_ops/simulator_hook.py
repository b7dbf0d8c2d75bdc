"""The ``NKI_SIMULATOR`` start-up hook: what ``nki_ops_simulator.pth`` runs when the interpreter starts.

Every nki-ops wheel puts ``nki_ops_simulator.pth`` into site-packages; ``site`` executes its one
line (:data:`HOOK_LINE`) at start-up. Without ``NKI_SIMULATOR`` (or with it 0 / false / no / off)
the line reads one environment variable and nothing else happens. With it, :func:`arm` adds a
finder to ``sys.meta_path`` and still imports nothing: the first ``import nki`` /
``import neuronxcc`` / ``import nki_cpu_simulator`` runs
:func:`nki_kernels.simulator.install` (which registers the simulator under those names unless
the genuine packages import) and hands back the module it registered. So an interpreter that
never imports NKI does not pay for NumPy or the simulator, and tools that inspect modules at
start-up (pytest's assertion rewriting of the plugin's distribution) find nothing imported early.

This module lives in the light ``nki_ops`` package, not in ``nki_kernels``, because importing
anything under ``nki_kernels`` imports the whole package.
"""

from __future__ import annotations

import os
import sys

HOOK_NAME = "nki_ops_simulator.pth"
# One line, executed by `site` at start-up (a .pth line runs only if it starts with "import").
HOOK_LINE = ("import os; os.environ.get('NKI_SIMULATOR', '').strip().lower() not in ('', '0', 'false', 'no', 'off') "
             "and __import__('nki_ops.simulator_hook', fromlist=['arm']).arm()\n")
NAMES = ("nki", "neuronxcc", "nki_cpu_simulator")


def enabled(environ=None) -> bool:
    """Whether ``NKI_SIMULATOR`` asks for the simulator (set, and not 0 / false / no / off)."""
    value = (os.environ if environ is None else environ).get("NKI_SIMULATOR", "")
    return value.strip().lower() not in ("", "0", "false", "no", "off")


class _Registered:
    """Loader handing back a module :func:`install` registered, as is."""

    def __init__(self, module):
        self.module = module
        self.own_spec = getattr(module, "__spec__", None)

    def create_module(self, spec):
        """The registered module (the import system then stamps ``__spec__`` on it)."""
        return self.module

    def exec_module(self, module):
        """Nothing to run; put back the module's own ``__spec__``, which the import system overwrote."""
        module.__spec__ = self.own_spec


class SimulatorFinder:
    """``sys.meta_path`` finder that installs the simulator at the first import of an NKI package."""

    def find_spec(self, fullname, path=None, target=None):
        """For ``nki`` / ``neuronxcc`` / ``nki_cpu_simulator``: install, then return what was registered."""
        if path is not None or fullname not in NAMES:
            return None
        disarm()  # once, and before install(), which imports these names itself to probe the genuine ones
        from importlib.machinery import ModuleSpec

        from nki_kernels.simulator import install

        install()
        if fullname not in sys.modules:  # not registered by install(): let the other finders look
            return None
        # Out of sys.modules until the loader puts it back: with it there, the import system would
        # trade this spec for the module's own (the simulator package's file) and run that again.
        return ModuleSpec(fullname, _Registered(sys.modules.pop(fullname)))


def arm() -> None:
    """Add :class:`SimulatorFinder` to the front of ``sys.meta_path`` (once)."""
    if not any(isinstance(f, SimulatorFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, SimulatorFinder())


def disarm() -> None:
    """Remove :class:`SimulatorFinder` from ``sys.meta_path``."""
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, SimulatorFinder)]
