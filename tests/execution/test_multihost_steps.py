"""Multi-host steps: ``ResourceConfig(hosts=N)`` runs a step's function as N Ray tasks that form one
``jax.distributed`` job (gloo collectives on this CPU), and the executor sees one step."""

import json
import time

import pytest

from marin.execution import Executor, ExecutorStep, ResourceConfig, StepsFailed, TpuSlices, this_output_path
from marin.execution.ray_runner import InfeasibleResources, _host_envs
from marin.storage import join, read_text
from tests.execution.steps_lib import EnvConfig, HostConfig, env_step, host_step

pytestmark = pytest.mark.usefixtures("ray_address")


def gang(name: str, hosts: int = 2, env_vars=None, **config) -> ExecutorStep:
    return ExecutorStep(
        name=name,
        fn=host_step,
        config=HostConfig(output_path=this_output_path(), **config),
        resources=ResourceConfig(num_cpus=1, hosts=hosts, env_vars=env_vars or {}),
    )


def _use_jax() -> int:
    import jax

    return jax.device_count()


def test_a_two_host_step_runs_as_one_jax_job(tmp_path):
    import ray

    # Leave pooled workers with JAX's backend initialised, as earlier steps of a session do: the hosts
    # must not land in one of them (jax.distributed.initialize would refuse).
    ray.get([ray.remote(_use_jax).options(num_cpus=1).remote() for _ in range(8)])
    step = gang("train/two-hosts")
    result = Executor(prefix=str(tmp_path / "store"), poll_s=0.05).run([step])
    out = result.plan.steps[0].output_path
    hosts = [json.loads(read_text(join(out, f"host-{i}.json"))) for i in range(2)]
    assert [h["process_index"] for h in hosts] == [0, 1]
    assert all(h["process_count"] == 2 and h["gathered"] == [1, 2] for h in hosts)  # a real cross-process collective
    assert hosts[0]["pid"] != hosts[1]["pid"]
    assert hosts[0]["coordinates"][0] == hosts[1]["coordinates"][0]  # one coordinator
    assert [h["coordinates"][1:] for h in hosts] == [[2, 0], [2, 1]]


def test_a_host_that_raises_fails_the_step_at_once_naming_the_host(tmp_path):
    # Process 0 would wait for process 1 in jax.distributed.initialize for minutes: the gang cancels it.
    start = time.monotonic()
    with pytest.raises(StepsFailed, match=r"host 1 of 2: RuntimeError: process 1 was told to fail"):
        Executor(prefix=str(tmp_path / "store"), poll_s=0.05).run([gang("train/bad-host", fail_process=1)])
    assert time.monotonic() - start < 60


def test_more_hosts_than_the_cluster_holds_fail_fast(tmp_path, monkeypatch):
    big = ExecutorStep(
        name="train/many",
        fn=host_step,
        config=HostConfig(output_path=this_output_path()),
        resources=ResourceConfig(num_cpus=4, hosts=3),
    )  # the session's Ray has 8 CPUs: 2 fit
    with pytest.raises(InfeasibleResources, match=r"'train/many' needs 3 hosts of \{'CPU': 4.0\}; .* holds only 2"):
        Executor(prefix=str(tmp_path / "store")).run([big])


def test_env_vars_reach_the_step_process_and_only_it(tmp_path):
    """``ResourceConfig.env_vars`` is the environment the step's worker starts with (allocator tunables
    are read only at process start: docs/trainer.md), for one host and for each host of a gang; a step
    without it does not inherit it from a pooled worker."""
    names = ("MARIN_TEST_ENV", "GLIBC_TUNABLES")
    env = {"MARIN_TEST_ENV": "on", "GLIBC_TUNABLES": "glibc.malloc.arena_max=1"}
    steps = [
        ExecutorStep(
            name="env/with",
            fn=env_step,
            config=EnvConfig(output_path=this_output_path(), names=names),
            resources=ResourceConfig(num_cpus=1, env_vars=env),
        ),
        ExecutorStep(
            name="env/without",
            fn=env_step,
            config=EnvConfig(output_path=this_output_path(), names=names),
            resources=ResourceConfig(num_cpus=1),
        ),
        gang("env/gang", env_vars=env),
    ]
    result = Executor(prefix=str(tmp_path / "store"), poll_s=0.05).run(steps)
    planned = {p.name: p for p in result.plan.steps}
    with_env, without, gang_step = planned["env/with"], planned["env/without"], planned["env/gang"]
    assert json.loads(read_text(join(with_env.output_path, "env.json"))) == env
    assert json.loads(read_text(join(without.output_path, "env.json"))) == {n: None for n in names}
    for i in range(2):
        host = json.loads(read_text(join(gang_step.output_path, f"host-{i}.json")))
        assert host["env"] == env, host


def test_tpu_pods_expand_to_hosts_and_multislice_coordinates():
    pod = ResourceConfig.tpu_pod("v5e-256", slices=2)
    assert (pod.hosts, pod.resources, pod.tpu) == (128, {"TPU": 4}, TpuSlices("v5litepod", "16x16", 2))
    envs = _host_envs("10.0.0.2:8476", pod)
    assert envs[0]["MARIN_PROCESS_ID"] == "0" and envs[127]["MARIN_PROCESS_ID"] == "127"
    assert {e["MARIN_NUM_PROCESSES"] for e in envs} == {"128"}
    assert [envs[i]["MEGASCALE_SLICE_ID"] for i in (0, 63, 64, 127)] == ["0", "0", "1", "1"]
    assert envs[5]["MEGASCALE_COORDINATOR_ADDRESS"] == "10.0.0.2" and envs[5]["MEGASCALE_NUM_SLICES"] == "2"
    assert ResourceConfig.tpu_pod("v5e-8").resources == {"TPU": 8, "TPU-v5litepod-8-head": 1}  # one host: its own pod
    with pytest.raises(ValueError, match="unknown TPU pod type 'v9-1'"):
        ResourceConfig.tpu_pod("v9-1")
    with pytest.raises(ValueError, match="hosts must be an int >= 1"):
        ResourceConfig(hosts=0)
