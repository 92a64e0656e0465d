"""Options every command shares, defined once (as pip's ``cmdoptions``): the parser class,
PATH and the output options, the stream a command is about, time windows, paging.

Invariants:
- A usage error is one line, ``ckptlog: error: ...`` with exit status 2 (:class:`Parser`).
"""

from __future__ import annotations

import argparse
from typing import NoReturn

from eventlog.cli.context import USAGE, CliError


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line: ``ckptlog: error: ...``."""

    def error(self, message: str) -> NoReturn:
        hint = f" (see `{self.prog} --help`)"
        raise CliError(f"{message}{hint}", USAGE)


def common() -> Parser:
    """PATH, --json, --color and --chain-key-file: the parent of every command's parser."""
    p = Parser(add_help=False)
    p.add_argument(
        "path",
        metavar="PATH",
        help="the log directory (holding data.mdb) or a postgresql://host/db?schema=NAME URL",
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.add_argument(
        "--color",
        choices=("auto", "always", "never"),
        default="auto",
        help="colour output: auto (default) = only on a terminal and when NO_COLOR is unset",
    )
    p.add_argument(
        "--chain-key-file", metavar="FILE", help="the chain key of a log written with one"
    )
    return p


def target(p: argparse.ArgumentParser, *, optional: bool = False) -> None:
    """ID (or --thread/--ns): the stream a command is about."""
    p.add_argument(
        "invocation",
        metavar="ID",
        nargs="?",
        help="an invocation id, an integration's stream (`ckptlog ls` names them) or a "
        "LangGraph thread id" + (" (default: every stream)" if optional else ""),
    )
    p.add_argument("--thread", metavar="T", help="a LangGraph thread (instead of ID)")
    p.add_argument("--ns", metavar="NS", help="its checkpoint namespace (default: root)")


def window(p: argparse.ArgumentParser, what: str = "saves") -> None:
    """--since/--until: a window of save times."""
    p.add_argument("--since", metavar="TIME", help=f"{what} stamped at or after TIME")
    p.add_argument("--until", metavar="TIME", help=f"{what} stamped before TIME")


def seq_range(p: argparse.ArgumentParser, start: str, stop: str) -> None:
    """--from/--to: seqs of one stream."""
    p.add_argument("--from", dest="from_seq", metavar="SEQ", help=start)
    p.add_argument("--to", dest="to_seq", metavar="SEQ", help=stop)


def full(p: argparse.ArgumentParser, text: str) -> None:
    p.add_argument("--full", action="store_true", help=text)


def no_pager(p: argparse.ArgumentParser) -> None:
    p.add_argument("--no-pager", action="store_true", help="never page (default: on a terminal)")


def no_verify(p: argparse.ArgumentParser, text: str) -> None:
    p.add_argument("--no-verify", action="store_true", help=text)
