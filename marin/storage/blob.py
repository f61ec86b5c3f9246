"""What a conditional write returns and raises, shared by ``marin.storage.conditional`` (the four operations and
the local backends) and ``marin.storage.object_stores`` (GCS and S3), which the former loads only once a bucket is
used; a module of its own, so that neither imports the other for them."""

from __future__ import annotations

import dataclasses


class ConditionalWriteUnsupported(RuntimeError):
    """The backend cannot make a write conditional; raised only where a caller demands a real guarantee."""


@dataclasses.dataclass(frozen=True)
class VersionedBlob:
    """The content of a small file together with the token that identifies this exact version of it."""

    data: bytes
    version: str
