"""python -m marin.report experiments/<file>.py --prefix URL [--out report.md] [--browser_url URL] [--repo_url URL]
                        [--issue N] [--post]
python -m marin.report --leaderboard [experiments/<file>.py ...] --prefix URL [--out leaderboard.md]

argparse rather than draccus: the experiment file is positional and ``--post`` is a bare flag, which is how
people type it; there is no nested config to parse.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from marin.logs import configure_logging
from marin.report import Links, ReportError, post_report, write_leaderboard, write_report


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m marin.report", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "experiments",
        nargs="*",
        metavar="experiment",
        help="the experiment file, e.g. experiments/quickstart.py (never executed); with --leaderboard, any number",
    )
    parser.add_argument(
        "--leaderboard",
        action="store_true",
        help="rank the training runs of the experiments given (default: every experiment under the prefix) by "
        "eval bits per byte, with FLOPs and wall time; writes reports/leaderboard.md",
    )
    parser.add_argument(
        "--prefix",
        default=os.environ.get("MARIN_PREFIX", "./local_store"),
        help="where the experiment ran (default $MARIN_PREFIX, else ./local_store)",
    )
    parser.add_argument(
        "--out", default=None, help="Markdown file to write (default reports/<script>.md, reports/leaderboard.md)"
    )
    parser.add_argument(
        "--browser_url",
        default="http://127.0.0.1:5000",
        help="data browser serving the prefix, for links ('' for plain paths)",
    )
    parser.add_argument(
        "--repo_url",
        default=None,
        help="https://github.com/<owner>/<repo> (default: the git remote recorded with the run)",
    )
    parser.add_argument(
        "--issue",
        type=int,
        default=None,
        help="issue to update (default: N of experiments/expN_*.py; else --post creates one)",
    )
    parser.add_argument("--post", action="store_true", help="create or update the GitHub issue with gh")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    configure_logging(logging.WARNING)

    links = Links(repo_url=args.repo_url, browser_url=args.browser_url or None)
    if args.leaderboard:
        if args.post:
            parser.error("--post is for an experiment's issue; a leaderboard is written to --out")
        try:
            print(write_leaderboard(args.prefix, args.experiments, args.out, links))
        except ReportError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        return 0
    if len(args.experiments) != 1:
        parser.error("give one experiment file (or --leaderboard with any number)")
    try:
        files = write_report(args.experiments[0], args.prefix, args.out, links)
    except ReportError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(files.markdown)
    if files.image:
        print(files.image)
    if args.post:
        outcome = post_report(files, links, args.issue)
        print(outcome.message, file=sys.stdout if outcome.posted else sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
