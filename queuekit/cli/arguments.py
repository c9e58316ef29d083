"""Argument types of the CLI: each says what it expected and what it got."""

from __future__ import annotations

import argparse
import math
import os
import sys


def show_progress(args) -> bool:
    """A tqdm bar unless --quiet, or stderr is not a terminal."""
    return not args.quiet and sys.stderr.isatty()


def size(text: str) -> tuple[int, int]:
    try:
        parts = [int(p) for p in text.lower().split("x")]
    except ValueError:
        parts = []
    if len(parts) == 1:
        parts *= 2
    if len(parts) != 2 or min(parts) < 1:
        raise argparse.ArgumentTypeError(f"expected N or HEIGHTxWIDTH, got {text!r}")
    return parts[0], parts[1]


def positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def ints(text: str, minimum: int = 1) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        values = []
    if not values or min(values) < minimum:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers of at least {minimum}, got {text!r}")
    return values


def reader_counts(text: str) -> list[int | str]:
    """``1,2,4`` or ``1,2,auto``: reader counts, ``auto`` meaning tuned while it runs."""
    parts = [p.strip() for p in text.split(",") if p.strip()]
    numbers = ",".join(p for p in parts if p != "auto")
    try:
        values: list[int | str] = list(ints(numbers)) if numbers else []
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated positive integers or auto, got {text!r}") from None
    if "auto" in parts:
        values.append("auto")
    if not values:
        raise argparse.ArgumentTypeError(f"expected reader counts or auto, got {text!r}")
    return values


def non_negative(text: str) -> int:
    return ints(text, 0)[0] if "," not in text else ints("x")[0]


def read_counts(text: str) -> list[int | str]:
    """``0,64`` or ``0,batch``: records per read, ``batch`` meaning a whole batch."""
    parts = [p.strip() for p in text.split(",") if p.strip()]
    numbers = ",".join(p for p in parts if p != "batch")
    if numbers or not parts:
        try:
            values: list[int | str] = list(ints(numbers, 0))
        except argparse.ArgumentTypeError:
            raise argparse.ArgumentTypeError(
                f"expected comma-separated integers of at least 0 or batch, got {text!r}"
            ) from None
    else:
        values = []
    return values + ["batch"] * ("batch" in parts)


def number(minimum: float, *, strict: bool):
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or value < minimum or (strict and value == minimum):
            bound = f"over {minimum:g}" if strict else f"at least {minimum:g}"
            raise argparse.ArgumentTypeError(f"expected a number {bound}, got {text!r}")
        return value
    return parse


def check_writable(path: str) -> None:
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise IsADirectoryError(21, "is a folder, not a file", path)
    if not os.path.isdir(folder):
        raise FileNotFoundError(2, "folder does not exist", folder)
    if not os.access(folder, os.W_OK):
        raise PermissionError(13, "folder is not writable", folder)


def beam_option(text: str) -> str:
    """KEY=VALUE -> the Beam flag ``--KEY=VALUE``."""
    key, sep, value = text.partition("=")
    key = key.strip().lstrip("-")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return f"--{key}={value}"


def check_beam_flags(parser, args) -> None:
    """Beam flags only with a Beam runner; nothing a Beam job cannot honour (usage errors)."""
    beam = getattr(args, "runner", "local") != "local"
    if (args.passthrough or getattr(args, "beam_option", None)) and not beam:
        parser.error("Beam pipeline options (--beam-option, or after --) need make --runner "
                     "beam or a Beam runner")
    if beam and args.shuffle:
        parser.error("--shuffle has no meaning with a Beam runner: Beam decides the order "
                     "of the records")
