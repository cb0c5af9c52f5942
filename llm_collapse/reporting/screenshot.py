"""Command line: ``python -m llm_collapse.reporting.screenshot REPORT.html OUT.png [--width W] [--height H]``.

A PNG of the top of a report as headless Chromium shows it (`llm_collapse.reporting.browser.screenshot`), e.g.
for the README's picture of a run's report. Bad input (no such page, OUT not a ``.png`` or not writable, a size
outside 200..8000 pixels, no Chromium installed) prints one line to stderr and exits 2; nothing is written.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from llm_collapse.errors import UserError
from llm_collapse.utils.commands import ArgumentParser, run_command, say, setup_logging
from llm_collapse.utils.paths import check_writable_dir

PROG = "python -m llm_collapse.reporting.screenshot"
SIZES = (200, 8000)


def _pixels(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not SIZES[0] <= value <= SIZES[1]:
        raise UserError(f"size {text!r} must be a whole number of pixels from {SIZES[0]} to {SIZES[1]}")
    return value


def _parser() -> ArgumentParser:
    parser = ArgumentParser(
        prog=PROG, description="Take a screenshot of a report.html with headless Chromium."
    )
    parser.add_argument(
        "page", type=Path, metavar="REPORT.html", help="the page (e.g. reports/default/report.html)"
    )
    parser.add_argument("out", type=Path, metavar="OUT.png", help="the PNG to write")
    parser.add_argument("--width", default="1280", help="window width in pixels (default 1280)")
    parser.add_argument(
        "--height", default="1600", help="window height in pixels: how much of the page (default 1600)"
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress (INFO)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns 0, 2 for bad input, 130 on Ctrl-C."""
    args = _parser().parse_args(argv)
    setup_logging(logging.INFO if args.verbose else logging.WARNING)
    return run_command(lambda: _shoot(args))


def _shoot(args) -> int:
    from llm_collapse.reporting.browser import screenshot

    width, height = _pixels(args.width), _pixels(args.height)
    if not args.page.is_file():
        raise UserError(f"no such page: {str(args.page)!r}; give the path of a report.html")
    if args.out.suffix.lower() != ".png":
        raise UserError(f"OUT {str(args.out)!r} must end in .png (Chromium writes PNG)")
    check_writable_dir(args.out.parent, what="the folder of OUT")
    out = screenshot(args.page, args.out, width=width, height=height)
    say(f"wrote {out} ({width} x {height} pixels of {args.page})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
