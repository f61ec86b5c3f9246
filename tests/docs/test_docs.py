"""The docs build with `mkdocs build --strict`; how their commands are found.

A command is a line of a ```bash (or sh/shell) block in docs/*.md (and README.md), with `\\` continuations
joined and trailing `# comments` dropped. tests/docs/test_run_doc_commands.py runs every one of them;
NEEDS_CLOUD lists, with the reason, the ones that need a cloud account (allowed on the cluster page only).
"""

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.M | re.S)

# Commands that need a GCP project, Docker daemon or TPU/GPU quota; allowed on docs/cluster.md only. What
# can be checked offline is: the YAMLs and the Dockerfile (tests/infra/test_cluster_configs.py) and the job
# submission itself against a local Ray (tests/infra/test_job_submit.py).
NEEDS_CLOUD: dict[str, str] = {
    "gcloud storage buckets create gs://YOUR_BUCKET --location=us": "creates a GCS bucket",
    "gcloud iam service-accounts create marin-worker": "creates a service account",
    "gcloud storage buckets add-iam-policy-binding gs://YOUR_BUCKET "
    "--member=serviceAccount:marin-worker@YOUR_GCP_PROJECT.iam.gserviceaccount.com "
    "--role=roles/storage.objectAdmin": "grants bucket access",
    "gcloud artifacts repositories create marin --repository-format=docker --location=us": "creates a registry",
    "docker build -f infra/Dockerfile -t us-docker.pkg.dev/YOUR_GCP_PROJECT/marin/marin-tpu:latest .": (
        "no Docker daemon in CI; the Dockerfile is checked statically"
    ),
    "docker push us-docker.pkg.dev/YOUR_GCP_PROJECT/marin/marin-tpu:latest": "pushes to a registry",
    "ray up infra/cluster-tpu-v5e.yaml --yes": "creates GCP VMs; the YAML passes Ray's checks in CI",
    "ray dashboard infra/cluster-tpu-v5e.yaml": "needs a running cluster",
    "ray up infra/cluster-gpu.yaml --yes": "creates GCP VMs; the YAML passes Ray's checks in CI",
    "ray down infra/cluster-tpu-v5e.yaml --yes": "needs a running cluster",
    "ray job submit --address http://127.0.0.1:8265 --working-dir . --runtime-env-json "
    '\'{"env_vars": {"MARIN_PREFIX": "gs://YOUR_BUCKET/lab"}}\' -- python experiments/tootsie_8b.py '
    "--run_only tootsie-8b-phase1": "needs v5e-256 slices; the same submission runs hello_world in CI",
    "python -m marin.report experiments/tootsie_8b.py --prefix gs://YOUR_BUCKET/lab --post": (
        "reads a real bucket and posts to GitHub; tests/report/test_report.py runs --post with a stand-in gh"
    ),
}


def strip_comment(line: str) -> str:
    """Drop a trailing `# comment` (a # at the start or after whitespace, outside quotes)."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line.rstrip()


def documented_commands(readme: bool = False) -> dict[str, set[str]]:
    """command -> the pages showing it (docs/*.md, and README.md with ``readme``)."""
    found: dict[str, set[str]] = {}
    pages = sorted(DOCS.glob("*.md")) + ([ROOT / "README.md"] if readme else [])
    for page in pages:
        for block in FENCE.finditer(page.read_text()):
            if block.group(1) not in ("bash", "sh", "shell"):
                continue
            pending = ""
            for raw in block.group(2).splitlines():
                line = strip_comment(raw.strip())
                line = f"{pending} {line}".strip() if pending else line
                if line.endswith("\\"):
                    pending = line[:-1].strip()
                    continue
                pending = ""
                if line:
                    found.setdefault(" ".join(line.split()), set()).add(page.name)
    return found


def test_extraction_joins_continuations_and_drops_comments():
    assert strip_comment('echo "a # b"   # note') == 'echo "a # b"'
    assert strip_comment("# only a comment") == ""
    assert strip_comment("curl http://x/#anchor") == "curl http://x/#anchor"


def test_cloud_only_commands_are_shown_on_the_cluster_page_only():
    commands = documented_commands(readme=True)
    assert "make quickstart" in commands and len(commands) > 20
    stale = sorted(set(NEEDS_CLOUD) - set(commands))
    assert not stale, f"NEEDS_CLOUD entries no page shows any more: {stale}"
    outside_cluster_page = {c: pages for c, pages in commands.items() if c in NEEDS_CLOUD and pages != {"cluster.md"}}
    assert not outside_cluster_page, outside_cluster_page


def test_mkdocs_build_strict(tmp_path):
    mkdocs = Path(sys.executable).parent / "mkdocs"
    if not mkdocs.exists():
        pytest.fail(f"mkdocs is not installed next to {sys.executable}: it is in the dev extra")
    out = subprocess.run(
        [str(mkdocs), "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    nav_pages = re.findall(r":\s*([\w/]+)\.md\s*$", (ROOT / "mkdocs.yml").read_text(), re.M)
    assert {"installation", "first_experiment", "quickstart", "cluster", "experiment_issues"} <= set(nav_pages)
    for page in nav_pages:
        built = tmp_path / "site" / ("index.html" if page == "index" else f"{page}/index.html")
        assert built.exists(), page
    index = (tmp_path / "site" / "index.html").read_text()
    assert "cdnjs" not in index and "Running on a Ray cluster" in index  # nothing fetched from a CDN to read it


RESULT_FILE = re.compile(r"benchmarks/results/[\w.-]+\.json")


def test_benchmark_numbers_in_the_docs_point_to_result_files_in_the_repository():
    """A page quoting a benchmark names the JSON its numbers came from, and that file is tracked by git (a
    number nobody can look up is not evidence)."""
    pages = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
    named = {m.group(0): page.name for page in pages for m in RESULT_FILE.finditer(page.read_text())}
    assert named, "no page names a benchmark result file"
    tracked = set(
        subprocess.run(
            ["git", "ls-files", "benchmarks/results"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.split()
    )
    missing = {path: page for path, page in named.items() if path not in tracked}
    assert not missing, f"result files named by the docs but not in the repository: {missing}"
