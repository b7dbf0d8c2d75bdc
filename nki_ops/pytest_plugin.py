"""pytest plugin (registered through the ``pytest11`` entry point): ``pytest --nki-sim`` runs a
kernel test suite unmodified on the nki-ops simulator; ``--nki-shadow`` turns on shadow mode.

``--nki-sim`` registers the simulator as ``nki`` / ``neuronxcc.nki`` (and nki-library's
``nki_cpu_simulator.nki``) before the initial ``conftest.py`` files load, so conftests and
test modules that ``import nki`` at the top need no ``sitecustomize``. It also sets
``NKI_SIMULATOR=1`` in the environment: pytest-xdist workers and subprocesses the tests start
inherit it, and the start-up hook installed with nki-ops registers the simulator in them too.

``--nki-shadow`` sets ``NKI_SIM_SHADOW=1`` (read when the simulator's config is imported, so
workers and subprocesses get it) and ``nki_kernels.simulator.config.shadow = True`` in this
process.

Without either option the plugin does nothing and imports nothing beyond ``os``.
"""

from __future__ import annotations

import os

_STATE = {"sim": False, "shadow": False}


# Packages of this distribution that are a library, not the plugin. pytest rewrites the asserts of
# every package in a plugin's distribution; rewritten, the library's modules gain pytest's helpers
# (@py_builtins, @pytest_ar) in their namespaces, so `dir(nki.language)` is no longer the documented
# list, in every pytest session of an environment where nki-ops is installed.
LIBRARY_PACKAGES = ("nki_kernels", "jax_ops", "torch_ops")


def _leave_library_unrewritten(pluginmanager) -> None:
    """Take the library packages off pytest's list of modules to rewrite (the plugin's stay)."""
    hook = getattr(pluginmanager, "rewrite_hook", None)
    must = getattr(hook, "_must_rewrite", None)  # pytest's set of marked names (no public way to unmark)
    if isinstance(must, set):
        must.difference_update(LIBRARY_PACKAGES)
        cache = getattr(hook, "_marked_for_rewrite_cache", None)
        if isinstance(cache, dict):
            for name in [n for n in cache if n.partition(".")[0] in LIBRARY_PACKAGES]:
                del cache[name]


def pytest_addoption(parser, pluginmanager):
    """The ``nki-ops`` option group (and the library left as it is: see ``LIBRARY_PACKAGES``)."""
    _leave_library_unrewritten(pluginmanager)
    group = parser.getgroup("nki-ops", "NKI kernels on the nki-ops simulator")
    group.addoption("--nki-sim", action="store_true", default=False,
                    help="run NKI kernels on the nki-ops simulator: register it as nki / neuronxcc.nki before "
                         "collection and set NKI_SIMULATOR=1 for xdist workers and subprocesses")
    group.addoption("--nki-shadow", action="store_true", default=False,
                    help="turn on the simulator's shadow mode (NKI_SIM_SHADOW=1 and "
                         "nki_kernels.simulator.config.shadow = True)")


def _activate(sim: bool, shadow: bool) -> None:
    # Environment first: the config module reads NKI_SIM_SHADOW when it is imported (install()
    # imports it), and children spawned later (xdist workers, subprocess tests) inherit both.
    if shadow:
        os.environ["NKI_SIM_SHADOW"] = "1"
        _STATE["shadow"] = True
    if sim and not _STATE["sim"]:
        os.environ["NKI_SIMULATOR"] = "1"
        from nki_kernels.simulator import install

        install()
        _STATE["sim"] = True
    if shadow:
        from nki_kernels.simulator import config

        config.shadow = True


def pytest_load_initial_conftests(early_config, parser, args):
    """Install before the rootdir's ``conftest.py`` files are imported (they may ``import nki``)."""
    ns = early_config.known_args_namespace
    _activate(getattr(ns, "nki_sim", False), getattr(ns, "nki_shadow", False))


def pytest_configure(config):
    """Install for sessions where the early hook did not run (the plugin given with ``-p``)."""
    _activate(config.getoption("nki_sim"), config.getoption("nki_shadow"))


def pytest_report_header(config):
    """Say in the session header what the options changed."""
    lines = []
    if _STATE["sim"]:
        lines.append("nki-ops: --nki-sim: nki / neuronxcc.nki are the nki-ops simulator (NKI_SIMULATOR=1)")
    if _STATE["shadow"]:
        lines.append("nki-ops: --nki-shadow: simulator shadow mode on (NKI_SIM_SHADOW=1)")
    return lines
