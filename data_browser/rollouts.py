"""An RL run's sample rollouts and reward curves: ``/rollouts?path=<run>&iteration=<k>``.

    /rollouts?path=local_store/checkpoints/quickstart-nano-rl-1a2b&iteration=12

Reading only what the RL step writes (``marin.posttrain.rl.metrics``): ``rollouts/iteration-<k>.jsonl`` (the
first groups of each iteration: prompt, completion, reward, advantage) and ``metrics.jsonl`` (its
``rl/<env>/reward_mean`` columns are the reward curves per environment). No lab code is imported: the file
names and fields are the contract.
"""

from __future__ import annotations

import dataclasses
import re

from data_browser import readers
from marin.storage import exists, join, list_dir

_ITERATION = re.compile(r"iteration-(\d+)\.jsonl$")
REWARD_CURVE = re.compile(r"^rl/(.+)/reward_mean$")


@dataclasses.dataclass(frozen=True)
class Rollout:
    env: str
    group: int
    sample: int
    prompt: str
    completion: str
    reward: float | None
    advantage: float | None
    finish_reason: str


def is_rl_run(path: str) -> bool:
    return exists(join(path, "rollouts"))


def iterations(path: str) -> list[int]:
    """The iterations with sample rollouts, in order."""
    found = (_ITERATION.search(url.rstrip("/")) for url in list_dir(join(path, "rollouts")))
    return sorted(int(m.group(1)) for m in found if m)


def samples(path: str, iteration: int, max_line_bytes: int, limit: int) -> list[Rollout]:
    """The sample rollouts of ``iteration`` (at most ``limit``); malformed lines are left out."""
    url = join(path, "rollouts", f"iteration-{iteration:06d}.jsonl")
    out = []
    for record in readers.iter_records(url, max_line_bytes):
        d = record.data if isinstance(record.data, dict) else {}
        if record.error or not d:
            continue
        out.append(
            Rollout(
                env=str(d.get("env", "")),
                group=int(d.get("group", -1)),
                sample=int(d.get("sample", -1)),
                prompt=str(d.get("prompt", "")),
                completion=str(d.get("completion", "")),
                reward=d.get("reward"),
                advantage=d.get("advantage"),
                finish_reason=str(d.get("finish_reason", "")),
            )
        )
        if len(out) >= limit:
            break
    return out


def reward_curves(columns: dict[str, list]) -> dict[str, list]:
    """``{env: [reward_mean per logged iteration]}`` from a run's metric columns (``training.load_metrics``)."""
    return {m.group(1): columns[key] for key in columns if (m := REWARD_CURVE.match(key))}
