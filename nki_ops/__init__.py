"""nki-ops' user-facing tools: the ``nki-ops`` command (:mod:`nki_ops.cli`), the pytest plugin
(:mod:`nki_ops.pytest_plugin`, options ``--nki-sim`` / ``--nki-shadow``), the profile writer
(:mod:`nki_ops.profiling`) and the ``NKI_SIMULATOR`` start-up hook's finder
(:mod:`nki_ops.simulator_hook`).

Importing this package imports nothing else: pytest loads the plugin in every session of an
environment where nki-ops is installed, so it must not pull NumPy or the simulator in unless asked.

PYTEST_DONT_REWRITE: with ``NKI_SIMULATOR=1`` (pytest-xdist workers of ``--nki-sim`` inherit it)
the start-up hook imports this package before pytest starts, and pytest would warn that the
plugin's package was imported too early to rewrite its asserts. It has none: this docstring's
marker tells pytest so (its submodules, the plugin included, are rewritten as usual).
"""
