"""python -m marin.report experiments/<file>.py --prefix URL [--out report.md] [--browser_url URL] [--repo_url URL]
                        [--issue N] [--post]

argparse rather than draccus: the experiment file is positional and ``--post`` is a bare flag, which is how
people type it; there is no nested config to parse.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from marin.logs import configure_logging
from marin.report import Links, ReportError, post_report, write_report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m marin.report", description=__doc__.split("\n\n")[0])
    parser.add_argument("experiment", help="the experiment file, e.g. experiments/quickstart.py (never executed)")
    parser.add_argument(
        "--prefix",
        default=os.environ.get("MARIN_PREFIX", "./local_store"),
        help="where the experiment ran (default $MARIN_PREFIX, else ./local_store)",
    )
    parser.add_argument("--out", default=None, help="Markdown file to write (default reports/<script>.md)")
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
    args = parser.parse_args(argv)
    configure_logging(logging.WARNING)

    links = Links(repo_url=args.repo_url, browser_url=args.browser_url or None)
    try:
        files = write_report(args.experiment, args.prefix, args.out, links)
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
