"""RL takes any optimizer: with schedule-free AdamW its update moves the average x as the trainer's step does,
the checkpoint's model is x, and the checkpoint records the optimizer (a resume with another is refused)."""

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from marin.posttrain.rl.loop import train_rl
from marin.trainer.checkpoint import IncompatibleCheckpoint, _read_array, list_checkpoints
from tests.posttrain.rl.rl_setup import rl_config


def _leaves(url: str) -> dict[str, np.ndarray]:
    manifest = json.loads(Path(url, "manifest.json").read_text())
    return {
        name: _read_array(f"{url}/{name}", np.dtype(meta["dtype"]), tuple(meta["shape"]))
        for name, meta in manifest["leaves"].items()
    }


@pytest.mark.slow  # one RL run of a tiny model (mostly compiling the engine's programs)
@pytest.mark.timeout(600)
def test_schedule_free_rl_keeps_its_average_and_saves_it_as_the_model(tmp_path):
    config = rl_config(tmp_path, str(tmp_path / "sf"), num_iterations=3)
    optimizer = dataclasses.replace(config.optimizer, kind="schedule_free_adamw", learning_rate=1e-2, warmup=2)
    config = dataclasses.replace(config, optimizer=optimizer)
    result = train_rl(config)
    assert result.iterations == 3
    _, url = list_checkpoints(f"{config.output_path}/checkpoints")[-1]
    assert json.loads(Path(url, "manifest.json").read_text())["metadata"]["optimizer"] == "schedule_free_adamw"
    leaves = _leaves(url)
    b1 = optimizer.beta1
    checked = 0
    for name, y in leaves.items():
        if not name.startswith("params/"):
            continue
        rest = name.removeprefix("params/")
        z = next(v for n, v in leaves.items() if n.startswith("opt_state/") and n.endswith(f"/z/{rest}"))
        x = leaves[f"ema/{rest}"]
        np.testing.assert_allclose(x, (y - (1 - b1) * z) / b1, rtol=1e-5, atol=1e-6)  # x from y and z
        checked += int(np.max(np.abs(x - y)) > 0)
    assert checked  # the average lags the parameters the gradient was taken at

    with pytest.raises(IncompatibleCheckpoint, match="optimizer 'schedule_free_adamw'.*kind is 'adamw'"):
        train_rl(dataclasses.replace(config, optimizer=dataclasses.replace(optimizer, kind="adamw", warmup=0)))
