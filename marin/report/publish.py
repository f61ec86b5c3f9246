"""Posting a report to its GitHub issue with the ``gh`` CLI, when ``gh`` is there and logged in.

    outcome = post_issue("reports/exp42_wsd.md", title="exp42: WSD vs cosine", issue=42, repo="me/lab")
    outcome.posted, outcome.message   # (True, "https://github.com/me/lab/issues/42") or (False, "gh is not ...")

``gh`` rather than the REST API: it already holds the user's credentials (``gh auth login``), so the lab
never handles a token. Without ``gh`` (or not logged in) nothing fails: the Markdown file stays where it
was written and the message says how to post it by hand. Images cannot be attached through ``gh``, so
the loss curve is left for the user to drag into the issue (the message says so).
"""

from __future__ import annotations

import dataclasses
import logging
import re
import shutil
import subprocess

logger = logging.getLogger(__name__)

GH_TIMEOUT_S = 60


@dataclasses.dataclass(frozen=True)
class PostOutcome:
    posted: bool
    message: str
    """The issue URL when posted, else why not and what to do instead."""


def github_repo(repo_url: str | None) -> str | None:
    """``https://github.com/<owner>/<repo>`` -> ``<owner>/<repo>`` (what ``gh --repo`` takes)."""
    match = re.match(r"^https?://github\.com/([^/]+/[^/]+?)/?$", repo_url or "")
    return match.group(1) if match else None


def gh_unavailable() -> str | None:
    """None if ``gh`` is installed and authenticated, else the reason it cannot be used."""
    if shutil.which("gh") is None:
        return "gh is not installed (https://cli.github.com)"
    try:
        status = subprocess.run(["gh", "auth", "status"], capture_output=True, text=True, timeout=GH_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"gh auth status failed: {e}"
    if status.returncode != 0:
        return "gh is not authenticated (run `gh auth login`)"
    return None


def post_issue(
    body_path: str, *, title: str, issue: int | None, repo: str | None, image: str | None = None
) -> PostOutcome:
    """Update issue ``issue``'s body from ``body_path``, or create an issue when ``issue`` is None."""
    reason = gh_unavailable()
    if reason is not None:
        return PostOutcome(
            False, f"not posted: {reason}; the report is at {body_path} (paste it into the experiment's issue)"
        )
    repo_args = ["--repo", repo] if repo else []
    if issue is not None:
        command = ["gh", "issue", "edit", str(issue), "--body-file", body_path, *repo_args]
    else:
        command = ["gh", "issue", "create", "--title", title, "--body-file", body_path, *repo_args]
    logger.info("running %s", " ".join(command))
    try:
        out = subprocess.run(command, capture_output=True, text=True, timeout=GH_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as e:
        return PostOutcome(False, f"not posted: {' '.join(command)} failed ({e}); the report is at {body_path}")
    if out.returncode != 0:
        detail = (out.stderr or out.stdout).strip()
        return PostOutcome(
            False,
            f"not posted: {' '.join(command[:3])} exited {out.returncode}: {detail}; the report is at {body_path}",
        )
    url = out.stdout.strip().splitlines()[-1] if out.stdout.strip() else f"issue {issue}"
    hint = f" (attach {image} to the issue by hand: gh cannot upload images)" if image else ""
    return PostOutcome(True, f"{url}{hint}")
