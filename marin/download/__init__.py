"""Download step: Hugging Face hub repos at a pinned revision, or any fsspec URL, with provenance.

``download_dataset(DownloadConfig(...))``; see ``marin.download.step`` for the layout and
``marin.download.fetch`` for resumption and verification.
"""

from marin.download.fetch import VerificationError
from marin.download.sources import RemoteFile
from marin.download.step import DownloadConfig, download_dataset

__all__ = ["DownloadConfig", "RemoteFile", "VerificationError", "download_dataset"]
