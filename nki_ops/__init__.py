"""nki-ops' user-facing tools: the ``nki-ops`` command (:mod:`nki_ops.cli`), the pytest plugin
(:mod:`nki_ops.pytest_plugin`, options ``--nki-sim`` / ``--nki-shadow``) and the profile writer
(:mod:`nki_ops.profiling`).

Importing this package imports nothing else: pytest loads the plugin in every session of an
environment where nki-ops is installed, so it must not pull NumPy or the simulator in unless asked.
"""
