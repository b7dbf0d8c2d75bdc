"""The README stays a guide: at most 16 KB, and what it names exists."""

from __future__ import annotations

import pathlib
import re

from nki_ops import cli

ROOT = pathlib.Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def test_size():
    assert len(README.encode()) <= 16 * 1024


def test_quick_start_commands_and_named_files_exist():
    assert "bash scripts/demo.sh" in README and "bash scripts/test.sh" in README
    for path in set(re.findall(r"\b((?:examples|scripts|docs|nki_kernels|tests)/[\w./-]+\.(?:py|sh|md))", README)):
        assert (ROOT / path).is_file(), path


def test_nki_ops_commands_it_shows_parse():
    parser = cli.build_parser()
    assert set(re.findall(r"`nki-ops (\w+)", README)) <= {"run", "env", "profile"}
    (profile,) = set(re.findall(r"`nki-ops (profile [^`]+)`", README))
    args = parser.parse_args(profile.split())
    assert args.arg == ["1024x2048", "2048"] and args.grid == [8] and args.out == "prof"
    assert parser.parse_args(["run", "examples/first_kernel.py"]).script == "examples/first_kernel.py"


def test_every_environment_variable_in_the_table_is_read_somewhere():
    table = README.split("## Environment variables", 1)[1].split("\n## ", 1)[0]
    names = set(re.findall(r"^\| `([A-Z_]+)", table, re.MULTILINE))
    assert {"NKI_SIMULATOR", "NKI_SIM_SHADOW"} <= names
    sources = "".join(p.read_text() for d in ("nki_kernels", "jax_ops", "torch_ops", "nki_ops", "tests")
                      for p in (ROOT / d).rglob("*.py"))
    for name in names:
        assert name in sources, name
