"""infra/: the Ray cluster YAMLs pass Ray's own checks, and the clusters offer what experiments ask for.

What `ray up` would check before touching GCP is checked here with Ray's own code: the JSON schema shipped
in the ray package (ray/autoscaler/ray-schema.json), ``prepare_config`` + ``validate_config``, and the GCP
provider's node-type detection and TPU head-resource fill-out. What cannot be checked without a GCP
project (quota, image families, that a slice really boots) is not claimed here.
"""

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import ray.autoscaler
import yaml

from experiments import tootsie_8b
from marin.execution import Executor, ResourceConfig, TpuSlices
from marin.execution.step import TPU_POD_TYPES

ROOT = Path(__file__).resolve().parents[2]
INFRA = ROOT / "infra"
CLUSTERS = sorted(INFRA.glob("cluster-*.yaml"))
TPU_CLUSTERS = [p for p in CLUSTERS if "tpu" in p.name]


def load(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def ray_schema() -> dict:
    return json.loads((Path(ray.autoscaler.__file__).parent / "ray-schema.json").read_text())


def offered(config: dict) -> dict[str, dict[str, float]]:
    """Resources per node type as the autoscaler will see them (Ray's GCP provider adds TPU head names)."""
    from ray.autoscaler._private.gcp.node_provider import GCPNodeProvider

    filled = GCPNodeProvider.fillout_available_node_types_resources(config)
    return {
        name: {k: float(v) for k, v in t["resources"].items()} for name, t in filled["available_node_types"].items()
    }


def test_there_are_tpu_and_gpu_clusters():
    names = {p.name for p in CLUSTERS}
    assert {"cluster-tpu-v4.yaml", "cluster-tpu-v5e.yaml", "cluster-gpu.yaml"} <= names


@pytest.mark.parametrize("path", CLUSTERS, ids=lambda p: p.name)
def test_cluster_yaml_passes_rays_schema_and_validation(path):
    config = load(path)
    jsonschema.validate(config, ray_schema())  # the raw file, as written
    from ray.autoscaler._private.util import prepare_config, validate_config

    prepared = prepare_config(json.loads(json.dumps(config)))  # what `ray up` does before any cloud call
    validate_config(prepared)
    assert prepared["head_node_type"] == "head" and prepared["provider"]["type"] == "gcp"


@pytest.mark.parametrize("path", CLUSTERS, ids=lambda p: p.name)
def test_node_types_are_what_rays_gcp_provider_expects(path):
    from ray.autoscaler._private.gcp.config import get_node_type
    from ray.autoscaler._private.gcp.node import GCPNodeType

    config = load(path)
    types = config["available_node_types"]
    assert get_node_type(types["head"]["node_config"]) == GCPNodeType.COMPUTE  # a TPU head cannot autoscale
    assert types["head"]["resources"] == {"CPU": 0}  # steps never land on the head: it hosts the job driver
    for name, node_type in types.items():
        kind = get_node_type(node_type["node_config"])
        assert (kind == GCPNodeType.TPU) == name.startswith("tpu_"), name
        if kind == GCPNodeType.TPU:
            assert node_type["node_config"]["schedulingConfig"]["preemptible"] is True, name
        elif name != "head":
            assert node_type["node_config"]["scheduling"]["preemptible"] is True, name
        if node_type["resources"].get("GPU"):
            assert node_type["node_config"]["scheduling"]["onHostMaintenance"] == "TERMINATE", name


@pytest.mark.parametrize("path", TPU_CLUSTERS, ids=lambda p: p.name)
def test_tpu_node_types_declare_the_head_name_ray_derives(path):
    """Declared resources must not differ from Ray's fill-out: the YAML says what the autoscaler offers."""
    config = load(path)
    for name, resources in offered(config).items():
        assert resources == {k: float(v) for k, v in config["available_node_types"][name]["resources"].items()}
        if name.startswith("tpu_"):
            assert resources["TPU"] == 4 and sum(1 for k in resources if k.endswith("-head")) >= 1


def tootsie_resources() -> dict[str, ResourceConfig]:
    plan = Executor(prefix="gs://x").plan([*tootsie_8b.evals, *tootsie_8b.exports])
    return {p.name: p.step.resource_config for p in plan.steps}


def _fits(demand: dict[str, float], resources: dict[str, float]) -> bool:
    return all(resources.get(k, 0.0) >= v for k, v in demand.items())


def _slice_head(tpu: TpuSlices) -> str:
    """The resource Ray's slice placement group reserves on a slice's first host (its own derivation)."""
    from ray._private.accelerators.tpu import infer_tpu_pod_type_from_topology
    from ray.util.tpu import get_tpu_version_from_type

    pod_type = infer_tpu_pod_type_from_topology(tpu.topology, "TPU-" + get_tpu_version_from_type(tpu.version).upper())
    return f"TPU-{pod_type}-head"


def _slice_worker_types(tpu: TpuSlices) -> list[tuple[Path, str, dict]]:
    """(cluster, node type, its YAML) of every TPU worker type that boots slices of this kind."""
    head = _slice_head(tpu)
    return [
        (p, t, load(p)["available_node_types"][t])
        for p in TPU_CLUSTERS
        for t, r in offered(load(p)).items()
        if head in r
    ]


def test_tootsie_trains_on_every_host_of_whole_slices():
    resources = tootsie_resources()
    phase1, phase2, cooldown = (resources[f"checkpoints/tootsie-8b-{n}"] for n in ("phase1", "phase2", "cooldown"))
    assert (phase1.tpu, phase1.hosts) == (TpuSlices("v5litepod", "16x16", 2), 128)  # 2 x v5e-256, multislice
    assert (phase2.tpu, phase2.hosts) == (TpuSlices("v4", "8x8x16", 1), 256) and cooldown == phase2  # a v4-2048
    assert all(r.max_retries >= 100 for r in (phase1, phase2))


@pytest.mark.parametrize("pod_type", sorted(TPU_POD_TYPES))
def test_tpu_pod_table_agrees_with_rays_own_topology_math(pod_type):
    from ray.util.tpu import get_tpu_version_from_type, get_tpu_worker_resources

    version, topology, hosts, chips = TPU_POD_TYPES[pod_type]
    ray_hosts, bundle = get_tpu_worker_resources(topology=topology, accelerator_type=get_tpu_version_from_type(version))
    assert (ray_hosts, bundle["TPU"]) == (hosts, chips)


def test_each_tootsie_slice_request_is_offered_by_a_tpu_cluster():
    """A multi-host step reserves whole slices through Ray's slice placement group: the slice's head
    resource (as Ray derives it) must be a worker type's, booting that accelerator type, with room for all
    the slices, and each host's task must fit one of its hosts."""
    for name, request in tootsie_resources().items():
        if request.tpu is None:
            continue
        found = _slice_worker_types(request.tpu)
        assert found, f"{name}: no TPU worker type offers {_slice_head(request.tpu)}"
        for path, node_type, spec in found:
            assert spec["node_config"]["acceleratorType"] == _slice_head(request.tpu)[4:-5], (path.name, node_type)
            assert spec["max_workers"] >= request.tpu.slices, (name, path.name, node_type)
            assert _fits(request.demands(), offered(load(path))[node_type]), (name, request.demands())


def test_each_single_host_tootsie_request_fits_one_worker_type_of_a_tpu_cluster():
    """A one-host Ray task is placed on one node: some single worker type must hold the whole request."""
    for name, request in tootsie_resources().items():
        if request.hosts > 1:
            continue
        types = [
            f"{p.name}:{t}"
            for p in TPU_CLUSTERS
            for t, r in offered(load(p)).items()
            if t != "head" and _fits(request.demands(), r)
        ]
        assert types, f"no worker type can hold {request.demands()} ({name})"


def test_a_tpu_cluster_can_run_each_training_phase_with_its_data_steps():
    """Phases run where their slices are (--run_only per cluster, one gs:// prefix): each TPU cluster that
    offers a phase's slices also offers the data steps' 16 CPUs / 64 GiB."""
    resources = tootsie_resources()
    data = resources["documents/dclm_baseline"].demands()
    for phase in ("phase1", "phase2", "cooldown"):
        clusters = {p for p, _, _ in _slice_worker_types(resources[f"checkpoints/tootsie-8b-{phase}"].tpu)}
        assert len(clusters) == 1, (phase, clusters)
        assert any(_fits(data, r) for t, r in offered(load(clusters.pop())).items() if t != "head"), phase


def test_clusters_let_requests_wait_for_the_autoscaler():
    """Slices boot on demand (min_workers 0): the head sets MARIN_AUTOSCALING so the executor leaves a
    request no live node holds yet to the autoscaler instead of refusing it (marin.execution.ray_runner)."""
    for path in CLUSTERS:
        assert "export MARIN_AUTOSCALING=1;" in " ".join(load(path)["head_start_ray_commands"]), path.name


def _tpu_head_resources():
    spec = importlib.util.spec_from_file_location("tpu_head_resources", INFRA / "tpu_head_resources.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_pod_head_resources_stay_on_the_first_host_only():
    module = _tpu_head_resources()
    resources = {"CPU": 112, "TPU": 4, "TPU-v5e-256-head": 1, "TPU-v5litepod-256-head": 1}
    assert module.host_resources(resources, 0) == resources
    assert module.host_resources(resources, 5) == {"CPU": 112, "TPU": 4}
    assert module.host_resources(resources, None) == {"CPU": 112, "TPU": 4}

    env = {**os.environ, "RAY_OVERRIDE_RESOURCES": json.dumps(resources)}
    for worker_id, expected in (("0", resources), ("3", {"CPU": 112, "TPU": 4})):
        out = subprocess.run(
            [sys.executable, str(INFRA / "tpu_head_resources.py")],
            env={**env, "TPU_WORKER_ID": worker_id},
            capture_output=True,
            text=True,
            check=True,
        )
        assert json.loads(out.stdout) == expected
    cpu_only = json.dumps({"CPU": 32, "memory": 161061273600})  # CPU workers: passed through, no TPU lookup
    out = subprocess.run(
        [sys.executable, "-S", str(INFRA / "tpu_head_resources.py")],
        env={"RAY_OVERRIDE_RESOURCES": cpu_only, "PATH": os.environ["PATH"]},
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == cpu_only


@pytest.mark.parametrize("path", [p for p in CLUSTERS], ids=lambda p: p.name)
def test_workers_start_ray_through_the_head_resource_filter_on_tpu_clusters(path):
    commands = " ".join(load(path)["worker_start_ray_commands"])
    uses_filter = "/opt/marin/infra/tpu_head_resources.py" in commands
    assert uses_filter == ("tpu" in path.name)


def test_dockerfile_installs_the_project_it_is_built_from():
    """Static checks (no Docker daemon here): sources exist, extras exist, pins agree with pyproject.toml."""
    import importlib.metadata
    import tomllib

    dockerfile = (INFRA / "Dockerfile").read_text()
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    python = re.search(r"^FROM python:(\d+\.\d+)", dockerfile, re.M).group(1)
    assert f">={python}" in pyproject["project"]["requires-python"]
    ignored = {
        line.strip()
        for line in (INFRA / "Dockerfile.dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    for sources in re.findall(r"^COPY (.+) \S+$", dockerfile, re.M):
        for source in sources.split():
            assert (ROOT / source).exists() and source not in ignored, source
    extras = re.search(r'pip install "\.\[([^\]]+)\]"', dockerfile).group(1).split(",")
    assert set(extras) <= set(pyproject["project"]["optional-dependencies"]), extras
    jax_pin = next(d for d in pyproject["project"]["dependencies"] if d.startswith("jax>="))
    assert f'"jax[${{JAX_EXTRA}}]{jax_pin[3:]}"' in dockerfile
    default_extra = re.search(r"^ARG JAX_EXTRA=(\S+)", dockerfile, re.M).group(1)
    jax_extras = importlib.metadata.metadata("jax").get_all("Provides-Extra")
    assert {default_extra, "cuda12", "cpu"} <= set(jax_extras)
    assert "/opt/marin" in dockerfile and "WORKDIR /opt/marin" in dockerfile  # where the YAMLs expect the code
