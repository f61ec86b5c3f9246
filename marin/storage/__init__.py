"""One door for all I/O: every step reads and writes URLs through these helpers.

Local paths, ``file://``, ``memory://``, ``gs://`` (gcsfs) and ``s3://`` (s3fs) all go through fsspec.
Besides plain reads and writes the executor needs two stronger primitives, kept in
``marin.storage.conditional``:

- ``create_only(url, data)``: write only if nothing exists there (the lease's "I am first");
- ``read_versioned`` / ``replace_if_version`` / ``delete_if_version``: compare-and-swap on a small file,
  where the version is a backend token (a content digest under a lock locally, a generation on GCS,
  an ETag on S3; ``marin.storage.object_stores``).

A step's task guards its output directory with ``marin.storage.fence``: once its lease is lost every write
helper here refuses (``LeaseLost``) instead of writing into the new holder's output.
``check_prefix`` (``marin.storage.preflight``) turns an unreachable endpoint, a missing bucket or a
permission error into one line naming the URL before any step runs; docs/storage.md has the details.
Record files (JSONL plain/.gz/.zst and Parquet) are streamed by ``marin.storage.records``.
"""

from marin.storage.conditional import (
    ConditionalWriteUnsupported,
    VersionedBlob,
    backend_name,
    create_only,
    delete_if_version,
    read_versioned,
    replace_if_version,
)
from marin.storage.fence import LeaseLost, check_fence, guard_prefix, unguard_prefix
from marin.storage.paths import (
    MissingBackend,
    delete,
    exists,
    filesystem,
    glob,
    is_local,
    join,
    list_dir,
    local_path,
    makedirs,
    open_url,
    read_bytes,
    read_text,
    write_atomic,
)
from marin.storage.preflight import StoreUnavailable, check_prefix
from marin.storage.records import (
    ReadStats,
    RecordError,
    RecordWriter,
    find_record_files,
    read_documents,
    read_records,
    write_records,
)
from marin.storage.urls import is_absolute, is_url, object_store, scheme_of, split_bucket, split_url

__all__ = [
    "ConditionalWriteUnsupported",
    "LeaseLost",
    "MissingBackend",
    "ReadStats",
    "RecordError",
    "RecordWriter",
    "StoreUnavailable",
    "VersionedBlob",
    "backend_name",
    "check_fence",
    "check_prefix",
    "create_only",
    "delete",
    "delete_if_version",
    "exists",
    "filesystem",
    "find_record_files",
    "glob",
    "guard_prefix",
    "is_absolute",
    "is_local",
    "is_url",
    "join",
    "list_dir",
    "local_path",
    "makedirs",
    "object_store",
    "open_url",
    "read_bytes",
    "read_documents",
    "read_records",
    "read_text",
    "read_versioned",
    "replace_if_version",
    "unguard_prefix",
    "scheme_of",
    "split_bucket",
    "split_url",
    "write_atomic",
    "write_records",
]
