"""``ckptlog bench``: the benchmarks, which ship with the source tree, not the package.

Found at ``<checkout>/benchmarks`` when ckptlog runs from a checkout (an editable install);
otherwise the command says where they are. Nothing in the installed package imports them.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

from eventlog.cli.context import USAGE, CliError, Ctx

CHECKOUT = Path(__file__).resolve().parents[3]  # eventlog/cli/commands/bench.py -> checkout


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Everything after ``bench`` goes to ``python -m benchmarks`` (see the runner)."""


def run(ctx: Ctx) -> int:
    if (CHECKOUT / "benchmarks" / "__main__.py").is_file() and str(CHECKOUT) not in sys.path:
        sys.path.append(str(CHECKOUT))
    try:
        bench = importlib.import_module("benchmarks.__main__")
    except ImportError as e:
        raise CliError(
            f"the benchmarks are not available ({e}); they ship with the source tree, not the "
            "installed package: run `python -m benchmarks` from a checkout of ckptlog",
            USAGE,
        ) from e
    argv = list(ctx.args.bench_args)
    if argv[:1] == ["--"]:
        argv = argv[1:]
    return int(bench.main(argv) or 0)
