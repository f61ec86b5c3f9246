"""python -m data_browser --root ./local_store --root gs://bucket/prefix --port 5000 [--config_path browser.yaml]"""

from __future__ import annotations

import sys

import draccus

from data_browser.config import BrowserConfig
from marin.logs import configure_logging


def _roots_to_list(argv: list[str]) -> list[str]:
    """``--root a --root b`` (repeatable, like the Marin browser) becomes draccus's ``--roots [a, b]``."""
    roots, rest, i = [], [], 0
    while i < len(argv):
        if argv[i] == "--root" and i + 1 < len(argv):
            roots.append(argv[i + 1])
            i += 2
            continue
        if argv[i].startswith("--root="):
            roots.append(argv[i].split("=", 1)[1])
        else:
            rest.append(argv[i])
        i += 1
    if roots:
        rest += ["--roots", "[" + ", ".join("'" + r.replace("'", "''") + "'" for r in roots) + "]"]
    return rest


def main(argv: list[str] | None = None) -> None:
    import uvicorn

    from data_browser.app import create_app

    config = draccus.parse(BrowserConfig, args=_roots_to_list(sys.argv[1:] if argv is None else argv))
    configure_logging()
    print(f"data browser on http://{config.host}:{config.port}/ serving {', '.join(config.normalized_roots())}")
    uvicorn.run(create_app(config), host=config.host, port=config.port, log_level="warning")


if __name__ == "__main__":
    main()
