"""The docs build with `mkdocs build --strict`, and every command they show is exercised somewhere.

A command is a line of a ```bash (or sh/shell) block in docs/*.md, with `\\` continuations joined and
trailing `# comments` dropped. Each one must appear in EXERCISED, which names the file that runs it and a
string proving it does (usually `def test_...(`), or — only on the cluster page, only for commands that
need a cloud account — in NEEDS_CLOUD with the reason. A page that gains a command nobody runs fails here,
and so does a table entry whose command left the docs (the table cannot rot into a list of excuses).
"""

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.M | re.S)

QUICKSTART = "tests/experiments/test_quickstart.py"
REPORT = "tests/report/test_report.py"
COMMANDS = "tests/docs/test_doc_commands.py"
JOB = "tests/infra/test_job_submit.py"

# command -> (file that runs it, text in that file proving it, how it is run when not verbatim)
EXERCISED: dict[str, tuple[str, str, str]] = {
    "make quickstart": (QUICKSTART, "def test_quickstart_learns_exports_and_reruns_as_a_no_op(",
                        "the same DAG (same hashes) through the executor, as the session fixture"),
    "make test": ("Makefile", "test: $(VENV)/.installed-dev", "CI runs `make test`"),
    "python3.11 -m venv .venv": ("Makefile", "$(PYTHON) -m venv $(VENV)", "make test creates .venv this way"),
    '.venv/bin/pip install -e ".[dev]"': ("Makefile", '$(PIP) install -q -e ".[dev,export-test]"',
                                          "make test installs dev plus export-test"),
    ".venv/bin/mkdocs build --strict": ("tests/docs/test_docs.py", "def test_mkdocs_build_strict(", "into a temp dir"),
    "python experiments/quickstart.py --dry_run true": (QUICKSTART, "def test_default_quickstart_is_the_full_run_and_dry_runs(", ""),
    "python -m marin.report experiments/quickstart.py --prefix ./local_store --out reports/quickstart.md": (
        REPORT, "def test_report_for_the_quickstart_outputs(", "on the session's quickstart prefix"),
    "python experiments/hello_world.py --dry_run true": (
        "tests/execution/test_main.py", "def test_hello_world_default_prefix_run_rerun_and_dry_run(", ""),
    "python experiments/hello_world.py": (
        "tests/execution/test_main.py", "def test_hello_world_default_prefix_run_rerun_and_dry_run(", ""),
    "MARIN_PREFIX=/tmp/lab python experiments/hello_world.py --dry_run true": (
        "tests/execution/test_main.py", "def test_marin_prefix_env_and_flag(", "MARIN_PREFIX set to a temp dir"),
    "python -m marin.corpus --output /tmp/corpus": ("tests/corpus/test_corpus.py", "def test_cli_writes_a_corpus(",
                                                    "with fewer documents"),
    "python -m marin.corpus --output /tmp/big --train_docs_per_domain 100000": (
        "tests/corpus/test_corpus.py", "def test_cli_writes_a_corpus(", "with --train_docs_per_domain 300"),
    "make browse": (COMMANDS, "def test_data_browser_command_lines_serve(", "the Makefile recipe's command"),
    "python -m data_browser --root ./local_store --root gs://bucket/prefix --port 5000": (
        COMMANDS, "def test_data_browser_command_lines_serve(", "a temp dir, the GCS emulator, a free port"),
    "python -m data_browser --config_path browser.yaml": (COMMANDS, "def test_data_browser_command_lines_serve(", ""),
    "pip install -e '.[gcs]'": (COMMANDS, "def test_documented_extras_exist_and_dev_installs_them(",
                                "make test installs dev, which holds it"),
    "pip install -e '.[s3]'": (COMMANDS, "def test_documented_extras_exist_and_dev_installs_them(", "as above"),
    'pip install -e ".[cluster]"': (COMMANDS, "def test_documented_extras_exist_and_dev_installs_them(", "as above"),
    "pip install -e '.[report]'": (COMMANDS, "def test_documented_extras_exist_and_dev_installs_them(", "as above"),
    "python experiments/hello_world.py --prefix gs://my-bucket/lab": (
        COMMANDS, "def test_hello_world_on_a_gs_prefix(", "a bucket on the GCS emulator"),
    "python experiments/exp16_dclm_filtering.py --dry_run true": (
        "tests/experiments/test_exp16_dclm_filtering.py", "def test_dclm_filtering_dry_runs_anywhere(", ""),
    "python experiments/exp11_mixture_shift.py --dry_run true": (COMMANDS, "def test_exp11_dry_run_reuses_the_quickstart(", ""),
    "python -m marin.report experiments/exp11_mixture_shift.py --prefix ./local_store --out reports/exp11.md": (
        REPORT, "def test_cli_entry_point_runs_as_a_module(", "the same CLI on a hand-made exp7 prefix (exp11 must train first)"),
    "python -m marin.report experiments/tootsie_8b.py --prefix gs://YOUR_BUCKET/lab --post": (
        REPORT, "def test_post_updates_the_issue_of_the_file_name_or_creates_one(", "local prefix, a stand-in gh"),
    'export RAY_OVERRIDE_RUNTIME_ENV_DEFAULT_EXCLUDES=".venv,venv,__pycache__"': (
        JOB, "def test_documented_job_submission_runs_an_experiment_on_a_ray_cluster(", "verbatim"),
    "ray job submit --address http://127.0.0.1:8265 --working-dir . --runtime-env-json "
    "'{\"env_vars\": {\"MARIN_PREFIX\": \"gs://YOUR_BUCKET/lab\"}}' -- python experiments/hello_world.py": (
        JOB, "def test_documented_job_submission_runs_an_experiment_on_a_ray_cluster(",
        "against a local Ray head with its job server; a temp dir as the prefix"),
    "python -m marin.export --checkpoint_path local_store/checkpoints/quickstart-nano-<hash> --output_path /tmp/hf "
    "--tokenizer local_store/tokenizers/bundled-bpe2k-<hash>": (
        QUICKSTART, "def test_generate_and_export_command_lines_on_the_trained_model(", "on the session's quickstart"),
    'python -m marin.inference.sample --checkpoint local_store/exports/quickstart-nano-<hash> --prompt "Once upon a time" '
    "--max_new_tokens 20 --temperature 0": (
        QUICKSTART, "def test_generate_and_export_command_lines_on_the_trained_model(", "on the session's quickstart"),
    ".venv/bin/python benchmarks/attention_bench.py": (
        "tests/trainer/test_attention_bench.py", "def test_attention_bench_prints_a_table_with_ratios_to_reference(",
        "with --seqs 128 256, two backends, --reps 1 and --out in a temp dir"),
    ".venv/bin/python benchmarks/attention_bench.py --dtype bfloat16 --seqs 4096 8192 16384": (
        "tests/trainer/test_attention_bench.py", "def test_attention_bench_prints_a_table_with_ratios_to_reference(",
        "on CPU, in bfloat16 at seq 128 and 256 (an accelerator is needed for the long sequences)"),
}

# Commands that need a GCP project, Docker daemon or TPU/GPU quota; allowed on docs/cluster.md only. What
# can be checked offline is: the YAMLs and the Dockerfile (tests/infra/test_cluster_configs.py) and the job
# submission itself against a local Ray (tests/infra/test_job_submit.py).
NEEDS_CLOUD: dict[str, str] = {
    "gcloud storage buckets create gs://YOUR_BUCKET --location=us": "creates a GCS bucket",
    "gcloud iam service-accounts create marin-worker": "creates a service account",
    "gcloud storage buckets add-iam-policy-binding gs://YOUR_BUCKET "
    "--member=serviceAccount:marin-worker@YOUR_GCP_PROJECT.iam.gserviceaccount.com --role=roles/storage.objectAdmin":
        "grants bucket access",
    "gcloud artifacts repositories create marin --repository-format=docker --location=us": "creates a registry",
    "docker build -f infra/Dockerfile -t us-docker.pkg.dev/YOUR_GCP_PROJECT/marin/marin-tpu:latest .":
        "no Docker daemon in CI; the Dockerfile is checked statically",
    "docker push us-docker.pkg.dev/YOUR_GCP_PROJECT/marin/marin-tpu:latest": "pushes to a registry",
    "ray up infra/cluster-tpu-v5e.yaml --yes": "creates GCP VMs; the YAML passes Ray's checks in CI",
    "ray dashboard infra/cluster-tpu-v5e.yaml": "needs a running cluster",
    "ray up infra/cluster-gpu.yaml --yes": "creates GCP VMs; the YAML passes Ray's checks in CI",
    "ray down infra/cluster-tpu-v5e.yaml --yes": "needs a running cluster",
    "ray job submit --address http://127.0.0.1:8265 --working-dir . --runtime-env-json "
    "'{\"env_vars\": {\"MARIN_PREFIX\": \"gs://YOUR_BUCKET/lab\"}}' -- python experiments/tootsie_8b.py "
    "--run_only tootsie-8b-phase1": "needs v5e-256 slices; the same submission runs hello_world in CI",
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


def documented_commands() -> dict[str, set[str]]:
    """command -> the pages showing it."""
    found: dict[str, set[str]] = {}
    for page in sorted(DOCS.glob("*.md")):
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


def test_every_documented_command_is_exercised_or_needs_a_cloud_account():
    commands = documented_commands()
    assert "make quickstart" in commands and len(commands) > 20
    unmapped = sorted(set(commands) - set(EXERCISED) - set(NEEDS_CLOUD))
    assert not unmapped, "commands shown in docs/ that no test or CI step runs (add them to EXERCISED):\n" + \
        "\n".join(f"  {c}   ({', '.join(sorted(commands[c]))})" for c in unmapped)
    stale = sorted((set(EXERCISED) | set(NEEDS_CLOUD)) - set(commands))
    assert not stale, f"table entries no page shows any more: {stale}"
    outside_cluster_page = {c: pages for c, pages in commands.items() if c in NEEDS_CLOUD and pages != {"cluster.md"}}
    assert not outside_cluster_page, outside_cluster_page
    for command, (path, proof, _how) in EXERCISED.items():
        assert proof in (ROOT / path).read_text(), f"{command!r}: {path} does not contain {proof!r}"


def test_mkdocs_build_strict(tmp_path):
    mkdocs = Path(sys.executable).parent / "mkdocs"
    if not mkdocs.exists():
        pytest.fail(f"mkdocs is not installed next to {sys.executable}: it is in the dev extra")
    out = subprocess.run([str(mkdocs), "build", "--strict", "--site-dir", str(tmp_path / "site")], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    nav_pages = re.findall(r":\s*([\w/]+)\.md\s*$", (ROOT / "mkdocs.yml").read_text(), re.M)
    assert {"installation", "first_experiment", "quickstart", "cluster", "experiment_issues"} <= set(nav_pages)
    for page in nav_pages:
        built = tmp_path / "site" / ("index.html" if page == "index" else f"{page}/index.html")
        assert built.exists(), page
    index = (tmp_path / "site" / "index.html").read_text()
    assert "cdnjs" not in index and "Running on a Ray cluster" in index  # nothing fetched from a CDN to read it
