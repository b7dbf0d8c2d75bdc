"""Sharding on 8 host devices: custom_partitioning (no all-gather, psum-reduced dw) and shard_map.

JAX fixes its host device count when it initialises, which the rest of the
suite has already done, so the cases in ``jax_helpers_multidevice.py`` run in
one fresh interpreter with ``--xla_force_host_platform_device_count=8``;
each of its test functions is reported here as its own test.
"""

import ast
import os
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from .jax_helpers import ROOT

CASES_FILE = os.path.join(ROOT, "tests", "jax_helpers_multidevice.py")


def _case_names():
    tree = ast.parse(open(CASES_FILE).read())
    return [n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")]


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """{case name: [(outcome, message), ...]} from one 8-device pytest run of the cases file."""
    report = tmp_path_factory.mktemp("multidevice") / "report.xml"
    env = dict(os.environ)
    env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", CASES_FILE, f"--junitxml={report}"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
    if not report.exists():
        pytest.fail(f"the 8-device run produced no report (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    out = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        base = case.get("name").split("[")[0]
        bad = case.find("failure") if case.find("failure") is not None else case.find("error")
        skipped = case.find("skipped")
        outcome = "failed" if bad is not None else "skipped" if skipped is not None else "passed"
        detail = (bad if bad is not None else skipped)
        out.setdefault(base, []).append((case.get("name"), outcome, "" if detail is None else detail.text or ""))
    out["__output__"] = proc.stdout[-4000:] + proc.stderr[-4000:]
    return out


@pytest.mark.parametrize("case", _case_names())
def test_on_eight_devices(results, case):
    runs = results.get(case)
    assert runs, f"{case} did not run in the 8-device process:\n{results['__output__']}"
    for name, outcome, detail in runs:
        assert outcome == "passed", f"{name} {outcome}:\n{detail}"
