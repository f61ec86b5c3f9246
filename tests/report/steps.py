"""A step function for report tests: plans need an importable function, the report never calls it."""

import dataclasses


@dataclasses.dataclass(frozen=True)
class TinyConfig:
    n: int
    output_path: str
    input_path: str | None = None


def tiny_fn(config: TinyConfig) -> None:
    raise AssertionError("report tests plan steps and write their files by hand; nothing runs them")
