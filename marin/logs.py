"""The lab's one logging setup for entry points and Ray task bodies (library modules only get loggers)."""

from __future__ import annotations

import logging

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def configure_logging(level: int = logging.INFO) -> None:
    """Timestamped ``LEVEL logger: message`` lines on stderr; a no-op where logging is already configured."""
    logging.basicConfig(level=level, format=FORMAT)
