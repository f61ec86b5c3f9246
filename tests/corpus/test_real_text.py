"""Real public-domain text: the shipped files match their pins, the download and documents steps reproduce
nanoGPT's split and strip Gutenberg's licence, and every bad input is an error naming the file."""

import hashlib
import json
import lzma
from pathlib import Path

import pytest

from marin.corpus.documents import (
    TextDocumentsConfig,
    TextInputError,
    hash_fraction,
    split_text_documents,
    strip_gutenberg,
)
from marin.corpus.public import TEXTS_DIR, public_text
from marin.download import DownloadConfig, download_dataset
from marin.parallel import TaskFailed
from marin.storage.records import read_documents
from tests.download.servers import FileServer

SHAKESPEARE = public_text("tinyshakespeare")
GUTENBERG = public_text("gutenberg")


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def gutenberg_book(title: str, body: str, crlf: bool = True) -> bytes:
    """A file laid out as Project Gutenberg ships one (header, markers, credits, trailer, licence)."""
    text = (
        f"The Project Gutenberg EBook of {title}\n\nThis eBook is for the use of anyone anywhere at no cost\n\n"
        f"Language: English\n\n*** START OF THIS PROJECT GUTENBERG EBOOK {title.upper()} ***\n\n\n\n\n"
        f"Produced by An Anonymous Volunteer\n\n\n\n\n{body}\n\n\n\n\nEnd of the Project Gutenberg EBook of {title}\n\n"
        f"*** END OF THIS PROJECT GUTENBERG EBOOK {title.upper()} ***\n\n***** This file should be named 1.txt *****\n"
        "Section 1. General Terms of Use and Redistributing Project Gutenberg-tm electronic works\n"
    )
    return (text.replace("\n", "\r\n") if crlf else text).encode("utf-8")


def download(source, files, out, **kw):
    return download_dataset(
        DownloadConfig(
            source=source, files=tuple(files), expected_sha256=files, output_path=str(out), use_ray=False, **kw
        )
    )


def documents(raw, out, **kw):
    split_text_documents(TextDocumentsConfig(input_path=str(raw), output_path=str(out), **kw))
    return {split: list(read_documents(str(out / split / "documents.jsonl.gz"))) for split in ("train", "validation")}


def test_every_shipped_file_matches_its_pin_and_every_slice_book_its_upstream_text():
    for text in (SHAKESPEARE, GUTENBERG):
        for pinned in text.pinned(bundled=True):
            data = (Path(text.source(bundled=True)) / pinned.path).read_bytes()
            assert len(data) == pinned.size and sha256(data) == pinned.sha256, pinned.path
            if pinned.text_sha256:
                assert sha256(lzma.decompress(data)) == pinned.text_sha256, pinned.path
    upstream = {f.path for f in GUTENBERG.upstream}
    assert len(upstream) == 258 and sum(f.size for f in GUTENBERG.upstream) == 110_552_483
    assert {f.path.removesuffix(".xz") for f in GUTENBERG.bundled} <= upstream and len(GUTENBERG.bundled) == 47
    assert sum(f.size for f in GUTENBERG.bundled) <= 5.5 * 2**20  # a few MiB in git, never the corpus


def test_shakespeare_is_split_as_nanogpt_prepare_splits_it(tmp_path):
    provenance = download(SHAKESPEARE.source(), SHAKESPEARE.files(), tmp_path / "raw", license=SHAKESPEARE.license)
    assert (
        provenance["license"] == SHAKESPEARE.license
        and provenance["files"][0]["sha256"] == SHAKESPEARE.files()["input.txt"]
    )
    docs = documents(tmp_path / "raw", tmp_path / "docs", split="prefix", validation_fraction=0.1,
                     text_sha256=SHAKESPEARE.text_sha256())  # fmt: skip
    data = (TEXTS_DIR / "tinyshakespeare" / "input.txt").read_text(encoding="utf-8")
    n = len(data)
    [train], [val] = docs["train"], docs["validation"]
    assert train["text"] == data[: int(n * 0.9)] and val["text"] == data[int(n * 0.9) :]  # prepare.py's slices
    assert (len(train["text"]), len(val["text"])) == (1_003_854, 111_540)  # the counts prepare.py prints
    summary = json.loads((tmp_path / "docs" / "summary.json").read_text())
    assert summary["license"] == SHAKESPEARE.license and summary["validation"]["characters"] == 111_540


def test_gutenberg_transform_keeps_the_book_and_drops_header_credits_trailer_and_licence():
    body = "CHAPTER I\n\nIt was a dark night.\n\nProduced by the rain, said he."  # credits only lead
    for crlf in (True, False):
        assert strip_gutenberg(gutenberg_book("A Night", body, crlf=crlf).decode()) == body


def test_gutenberg_slice_books_lose_every_mention_of_project_gutenberg_at_their_edges(tmp_path):
    some = dict(list(GUTENBERG.files().items())[:6])
    download(GUTENBERG.source(), some, tmp_path / "raw")
    docs = documents(tmp_path / "raw", tmp_path / "docs", transform="gutenberg-v1", split="hash",
                     validation_fraction=0.3, text_sha256=GUTENBERG.text_sha256())  # fmt: skip
    books = docs["train"] + docs["validation"]
    assert sorted(d["id"] for d in books) == sorted(p.removesuffix(".xz") for p in some)
    for doc in books:
        edges = (doc["text"][:2000] + doc["text"][-2000:]).lower()
        assert "project gutenberg" not in edges and "\r" not in doc["text"], doc["id"]
        assert len(doc["text"]) > 10_000


def test_hash_split_keeps_whole_documents_and_is_the_same_for_the_slice_and_the_upstream_names(tmp_path):
    raw = tmp_path / "raw"
    (raw / "Author, A").mkdir(parents=True)
    names = [f"Author, A/Book {i}.txt" for i in range(40)]
    body = lambda i: " ".join([f"Text of book {i}."] * 50)
    for i, name in enumerate(names):  # half of them compressed, as the bundled slice ships them
        data = gutenberg_book(f"Book {i}", body(i))
        (raw / (name if i % 2 else f"{name}.xz")).write_bytes(data if i % 2 else lzma.compress(data))
    docs = documents(raw, tmp_path / "docs", transform="gutenberg-v1", split="hash", validation_fraction=0.25)
    held_out = {d["id"] for d in docs["validation"]}
    assert held_out == {n for n in names if hash_fraction(n) < 0.25} and 0 < len(held_out) < 40
    assert all(d["text"] == body(int(d["id"].split()[-1].removesuffix(".txt"))) for d in docs["train"])
    again = documents(raw, tmp_path / "again", transform="gutenberg-v1", split="hash", validation_fraction=0.25)
    assert again == docs


def test_upstream_route_downloads_over_http_with_quoted_paths_and_verifies_each_file(tmp_path):
    books = {"Doe, Jane/Emma [sic].txt": gutenberg_book("Emma", "Emma Woodhouse, handsome, clever.")}
    server = FileServer({f"/base/{p}": data for p, data in books.items()})
    with server:
        pins = {p: sha256(d) for p, d in books.items()}
        download(f"{server.url}/base/", pins, tmp_path / "raw", license="public domain")
        assert ("GET", "/base/Doe, Jane/Emma [sic].txt", None) in server.log  # the server unquotes what it got
        assert (tmp_path / "raw" / "Doe, Jane" / "Emma [sic].txt").read_bytes() == books["Doe, Jane/Emma [sic].txt"]
        server.tampered["/base/Doe, Jane/Emma [sic].txt"] = b"x" + books["Doe, Jane/Emma [sic].txt"][1:]
        quoted = r"/base/Doe%2C%20Jane/Emma%20%5Bsic%5D\.txt: SHA-256 [0-9a-f]{64} does not match the expected"
        with pytest.raises(TaskFailed, match=quoted):  # a checksum that differs is an error, and nothing is kept
            download(f"{server.url}/base/", pins, tmp_path / "bad", max_retries=0)
        assert not (tmp_path / "bad" / "Doe, Jane" / "Emma [sic].txt").exists()


def write_raw(tmp_path, name: str, data: bytes) -> Path:
    raw = tmp_path / "raw"
    raw.mkdir(exist_ok=True)
    (raw / name).write_bytes(data)
    return raw


@pytest.mark.parametrize(
    "name, data, pins, kw, message",
    [
        ("empty.txt", b"", {}, {}, r"empty\.txt: the file is empty \(0 bytes\)"),
        ("cut.txt.xz", lzma.compress(b"some text " * 100)[:-20], {}, {}, r"cut\.txt\.xz: truncated or corrupt xz"),
        (
            "latin.txt",
            "caf\u00e9 ok".encode("latin-1"),
            {},
            {},
            r"latin\.txt: bytes b'\\xe9' at offset 3 are not UTF-8",
        ),
        (
            "short.txt",
            b"some text",
            {"short.txt": "0" * 64},
            {},
            r"short\.txt: text SHA-256 is [0-9a-f]{64}, expected 0{64}",
        ),
        (
            "plain.txt",
            b"no markers here",
            {},
            {"transform": "gutenberg-v1"},
            r"plain\.txt: expected Project Gutenberg's",
        ),
        ("one.txt", b"x", {}, {"split": "prefix"}, r"one\.txt: 1 characters are too few"),
        ("solo.txt", b"a whole book", {}, {"split": "hash", "validation_fraction": 0.01}, r"leaves validation without"),
    ],
)
def test_bad_input_is_an_error_naming_the_file_and_nothing_is_written(tmp_path, name, data, pins, kw, message):
    raw = write_raw(tmp_path, name, data)
    with pytest.raises((TextInputError, ValueError), match=message):
        documents(raw, tmp_path / "docs", text_sha256=pins, **kw)
    assert not list((tmp_path / "docs").rglob("*.jsonl.gz")) and not (tmp_path / "docs" / "summary.json").exists()


def test_config_is_validated():
    for field, value in (("split", "random"), ("transform", "gutenberg"), ("validation_fraction", 1.0)):
        with pytest.raises(ValueError, match=f"TextDocumentsConfig.{field} must be"):
            TextDocumentsConfig(input_path="a", output_path="b", **{field: value})
