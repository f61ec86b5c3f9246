"""Print the Ray resources this host should advertise: ``$RAY_OVERRIDE_RESOURCES`` minus any TPU pod-head
resource unless this host is worker 0 of its TPU slice.

    RAY_OVERRIDE_RESOURCES="$(python /opt/marin/infra/tpu_head_resources.py)" ray start --address=...

Why: steps ask for a whole slice with one custom resource that exists once per slice, on its first host
(``{"TPU-v4-2048-head": 1}``). The autoscaler exports a node type's resources to every host of a
multi-host slice; Ray itself removes only the head name it derives from ``acceleratorType``
(``TPU-v5litepod-256-head``), not the alias our v5e node type declares (``TPU-v5e-256-head``, the name the
experiments use). Without this, all 64 hosts of a v5e-256 would offer the alias and a training task could
land on any of them. The worker id comes from Ray's own lookup (``TPU_WORKER_ID``, else GCE metadata).
Hosts without a pod-head resource (CPU and GPU workers) are passed through untouched, with no lookup.
"""

from __future__ import annotations

import json
import os
import sys


def is_pod_head_resource(name: str) -> bool:
    return name.startswith("TPU-") and name.endswith("-head")


def host_resources(resources: dict[str, float], worker_id: int | None) -> dict[str, float]:
    """Keep pod-head resources only on worker 0; drop them too when the id is unknown (better no slice
    than a slice whose training lands on a host that is not its coordinator)."""
    if worker_id == 0:
        return dict(resources)
    return {k: v for k, v in resources.items() if not is_pod_head_resource(k)}


def current_worker_id() -> int | None:
    from ray._private.accelerators.tpu import TPUAcceleratorManager

    return TPUAcceleratorManager.get_current_node_tpu_worker_id()


def main() -> int:
    raw = os.environ.get("RAY_OVERRIDE_RESOURCES", "")
    resources = json.loads(raw) if raw else {}
    if not any(is_pod_head_resource(k) for k in resources):
        print(raw)
        return 0
    worker_id = current_worker_id()
    if worker_id is None:
        print("tpu_head_resources: TPU worker id unknown; not advertising pod-head resources", file=sys.stderr)
    print(json.dumps(host_resources(resources, worker_id)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
