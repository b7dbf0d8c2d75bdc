"""The ``nki-ops`` command.

    nki-ops run SCRIPT [ARGS ...]      run a script with its NKI kernels on the simulator
    nki-ops env                        which Neuron stack is found and the path each framework takes
    nki-ops profile FILE.py:NAME --arg 128x512:float32 ... [--out DIR]
                                       profile one kernel: report, Perfetto trace and memory picture

``nki-ops <command> --help`` shows each command's options and their defaults.
"""

from __future__ import annotations

import argparse
import os
import runpy
import sys

TARGETS = ("trn1", "trn2", "trn3", "inf2", "gen2", "gen3", "gen4")


class _Formatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Defaults shown after each option's help (empty ones, which say nothing, left out);
    descriptions kept as written."""

    def _get_help_string(self, action):
        default = action.default
        if default is None or default is False or default is argparse.SUPPRESS or (isinstance(default, list)
                                                                                  and not default):
            return action.help
        return super()._get_help_string(action)


def _run(args) -> int:
    """``nki-ops run``: what ``NKI_SIMULATOR=1 python SCRIPT ARGS`` does, without the variable."""
    script = os.path.abspath(args.script)
    if not os.path.isfile(script):
        print(f"nki-ops run: no such script: {args.script}", file=sys.stderr)
        return 2
    # The variable too, so the script's subprocesses (and their start-up hook) simulate as well.
    os.environ["NKI_SIMULATOR"] = "1"
    if args.target:
        os.environ["NEURON_PLATFORM_TARGET_OVERRIDE"] = args.target
    from nki_kernels.simulator import install

    install()
    # As `python SCRIPT`: argv[0] is the script and its folder leads sys.path (its sibling imports).
    sys.argv = [script, *args.args]
    sys.path.insert(0, os.path.dirname(script))
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as exc:  # the script's own exit status
        code = exc.code
        if code is None or isinstance(code, int):
            return code or 0
        print(code, file=sys.stderr)
        return 1
    return 0


def _env(args) -> int:
    """``nki-ops env``: the environment report of ``python -m nki_kernels.env``."""
    from nki_kernels.env import main

    main()
    return 0


def _profile(args) -> int:
    """``nki-ops profile``: profile one kernel on random inputs and write the files to ``--out``."""
    from nki_ops import profiling

    try:
        written = profiling.profile_to_folder(args.kernel, args.arg, out=args.out, grid=args.grid,
                                              static=args.static, seed=args.seed)
    except (ValueError, ImportError) as exc:
        print(f"nki-ops profile: {exc}", file=sys.stderr)
        return 2
    for path in written:
        print(f"wrote {path}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``nki-ops`` (subcommands ``run``, ``env``, ``profile``)."""
    parser = argparse.ArgumentParser(prog="nki-ops", description=__doc__.split("\n\n")[1],
                                     formatter_class=_Formatter, allow_abbrev=False)
    sub = parser.add_subparsers(dest="command", required=True, metavar="{run,env,profile}")

    run = sub.add_parser("run", help="run a Python script with its NKI kernels on the simulator",
                         description="Run SCRIPT as `python SCRIPT ARGS` would, with the simulator registered as "
                                     "nki / neuronxcc.nki first: unmodified @nki.jit kernels of either API "
                                     "generation run on NumPy. Options after SCRIPT are the script's own.",
                         formatter_class=_Formatter, allow_abbrev=False)
    run.add_argument("--target", choices=TARGETS, default=None,
                     help="simulated NeuronCore (sets NEURON_PLATFORM_TARGET_OVERRIDE; without it: trn2)")
    run.add_argument("script", help="the Python script to run")
    run.add_argument("args", nargs=argparse.REMAINDER, help="the script's arguments")
    run.set_defaults(func=_run)

    env = sub.add_parser("env", help="which Neuron stack is importable and the path each framework takes",
                         formatter_class=_Formatter, allow_abbrev=False)
    env.set_defaults(func=_env)

    prof = sub.add_parser("profile", help="profile one kernel on the simulator (report, trace, memory picture)",
                          description="Run KERNEL once on random inputs (uniform in [0, 1)) with the profiler "
                                      "and write NAME.report.txt, NAME.report.json, NAME.trace.json (open in "
                                      "https://ui.perfetto.dev) and NAME.memory.png into --out. The folder gets "
                                      "a .gitignore of its own, so git ignores it wherever it is.",
                          formatter_class=_Formatter, allow_abbrev=False)
    prof.add_argument("kernel", help="FILE.py:NAME or package.module:NAME of an @nki.jit kernel (either API "
                                     "generation)")
    prof.add_argument("--arg", action="append", default=[], metavar="SHAPE[:DTYPE]",
                      help="one input per --arg, in order: 128x512 or 1024x4096:bfloat16 (dtype default float32)")
    prof.add_argument("--grid", type=int, nargs="+", default=None, metavar="N",
                      help="launch grid, e.g. --grid 4 2 (without it: one program)")
    prof.add_argument("--static", action="append", default=[], metavar="KEY=VALUE",
                      help="a keyword argument of the kernel (a Python literal, else a string)")
    prof.add_argument("--out", default="nki-profile", help="folder for the report, trace and picture")
    prof.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    prof.set_defaults(func=_profile)
    return parser


def main(argv=None) -> int:
    """Entry point of the ``nki-ops`` console script; returns the exit status."""
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
