"""The download step on loopback HTTP, a stand-in hub (through HF_ENDPOINT) and file:// sources:
verification, provenance, resume after an interrupted transfer, skip on rerun, errors. No internet."""

import hashlib
import json
import os

import pytest

from marin.download import DownloadConfig, download_dataset
from marin.parallel import TaskFailed
from tests.download.servers import FileServer

BIG = os.urandom(300_000)
FILES = {"/data/a.jsonl": b'{"text": "hello"}\n' * 100, "/data/sub/b.bin": BIG, "/readme.md": b"# data\n"}


def sha(data):
    return hashlib.sha256(data).hexdigest()


def cfg(**kw):
    kw.setdefault("use_ray", False)
    kw.setdefault("chunk_bytes", 16_384)
    return DownloadConfig(**kw)


def test_http_files_verified_with_provenance_and_skipped_on_rerun(tmp_path):
    out = tmp_path / "out"
    with FileServer(FILES) as server:
        config = cfg(
            source=f"{server.url}/data/",
            files=("a.jsonl", "sub/b.bin"),
            output_path=str(out),
            expected_sha256={"sub/b.bin": sha(BIG)},
        )
        prov = download_dataset(config)
        assert (out / "sub" / "b.bin").read_bytes() == BIG
        assert (out / "a.jsonl").read_bytes() == FILES["/data/a.jsonl"]
        assert [f["path"] for f in prov["files"]] == ["a.jsonl", "sub/b.bin"]
        assert prov["files"][1] == {
            "path": "sub/b.bin",
            "url": f"{server.url}/data/sub/b.bin",
            "size": len(BIG),
            "sha256": sha(BIG),
        }
        assert json.loads((out / "provenance.json").read_text())["total_bytes"] == len(BIG) + 1800
        assert not [p for p in out.rglob("*.partial")]
        gets = len(server.gets("b.bin"))
        download_dataset(config)
        assert len(server.gets("b.bin")) == gets  # complete and verified: not fetched again


def test_interrupted_transfer_resumes_with_a_range_request(tmp_path):
    with FileServer(FILES) as server:
        server.cut_after["/data/sub/b.bin"] = 100_000
        config = cfg(source=f"{server.url}/data/sub/b.bin", output_path=str(tmp_path / "o"), max_retries=0)
        with pytest.raises(TaskFailed, match="stream ended at byte 100000 of 300000|incomplete|closed"):
            download_dataset(config)
        have = (tmp_path / "o" / ".b.bin.partial").stat().st_size  # what arrived before the cut
        assert 50_000 < have <= 100_000 and not (tmp_path / "o" / "b.bin").exists()
        download_dataset(config)  # a later run continues where the first one stopped
        assert (tmp_path / "o" / "b.bin").read_bytes() == BIG
        assert server.gets("b.bin") == [None, f"bytes={have}-"]
        # Within one run, retries resume too.
        server.cut_after["/data/sub/b.bin"] = 50_000
        download_dataset(cfg(source=f"{server.url}/data/sub/b.bin", output_path=str(tmp_path / "p")))
        assert (tmp_path / "p" / "b.bin").read_bytes() == BIG
        first, resumed = server.gets("b.bin")[-2:]
        assert first is None and 0 < int(resumed[len("bytes=") : -1]) <= 50_000


def test_server_without_range_support_restarts_cleanly(tmp_path):
    with FileServer(FILES, honor_range=False) as server:
        server.cut_after["/data/sub/b.bin"] = 70_000
        download_dataset(cfg(source=f"{server.url}/data/sub/b.bin", output_path=str(tmp_path / "o")))
        assert (tmp_path / "o" / "b.bin").read_bytes() == BIG


def test_checksum_mismatch_fails_and_leaves_nothing(tmp_path):
    with FileServer(FILES) as server:
        config = cfg(
            source=f"{server.url}/readme.md",
            output_path=str(tmp_path / "o"),
            max_retries=1,
            expected_sha256={"readme.md": "0" * 64},
        )
        with pytest.raises(TaskFailed, match="VerificationError: .*SHA-256 .* does not match"):
            download_dataset(config)
        assert os.listdir(tmp_path / "o") == []
        assert len(server.gets("readme.md")) == 2  # retried once from scratch


def test_hub_dataset_through_hf_endpoint(tmp_path, monkeypatch):
    sha_commit = "a" * 40
    hub = {
        "org/tiny": {
            "sha": sha_commit,
            "refs": ("main",),
            "files": ["data/a.jsonl", "data/sub/b.bin", "readme.md"],
            "lfs": ["data/sub/b.bin"],
        }
    }
    with FileServer(FILES, hub=hub) as server:
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        monkeypatch.setenv("HF_HUB_DISABLE_XET", "1")
        out = tmp_path / "hub"
        prov = download_dataset(
            cfg(source="hf://datasets/org/tiny", revision="main", patterns=("data/*",), output_path=str(out))
        )
        assert prov["resolved_revision"] == sha_commit and prov["revision"] == "main"
        assert [f["path"] for f in prov["files"]] == ["data/a.jsonl", "data/sub/b.bin"]
        assert (out / "data" / "sub" / "b.bin").read_bytes() == BIG
        assert prov["files"][0]["git_sha1"] == hashlib.sha1(b"blob 1800\0" + FILES["/data/a.jsonl"]).hexdigest()
        assert f"/datasets/org/tiny/resolve/{sha_commit}/data/sub/b.bin" in [p for _, p, _ in server.log]
        # The hub's checksums are enforced: same sizes, different bytes.
        server.tampered["/data/a.jsonl"] = b"x" * 1800
        with pytest.raises(TaskFailed, match="git blob SHA-1 .* does not match the hub's"):
            download_dataset(
                cfg(
                    source="hf://datasets/org/tiny",
                    revision=sha_commit,
                    files=("data/a.jsonl",),
                    output_path=str(tmp_path / "t"),
                    max_retries=0,
                )
            )
        server.tampered["/data/sub/b.bin"] = BIG[::-1]
        with pytest.raises(TaskFailed, match="SHA-256 .* does not match"):
            download_dataset(
                cfg(
                    source="hf://datasets/org/tiny",
                    revision=sha_commit,
                    files=("data/sub/b.bin",),
                    output_path=str(tmp_path / "t"),
                    max_retries=0,
                )
            )
        with pytest.raises(Exception, match="not found|404|Repository"):
            download_dataset(cfg(source="hf://datasets/org/missing", revision="main", output_path=str(tmp_path / "m")))


def test_file_url_directory_with_patterns(tmp_path):
    src = tmp_path / "src"
    (src / "x").mkdir(parents=True)
    (src / "x" / "1.parquet").write_bytes(b"p1")
    (src / "2.jsonl.gz").write_bytes(b"p2")
    (src / "skip.txt").write_bytes(b"no")
    prov = download_dataset(
        cfg(source=f"file://{src}", patterns=("*.parquet", "*.gz"), output_path=str(tmp_path / "o"))
    )
    assert sorted(f["path"] for f in prov["files"]) == ["2.jsonl.gz", "x/1.parquet"]
    assert (tmp_path / "o" / "x" / "1.parquet").read_bytes() == b"p1"
    assert prov["files"][0]["sha256"] == sha(b"p2")
    # An object-store destination (memory:// here) goes through a temporary object, then a move.
    prov = download_dataset(cfg(source=str(src / "x"), output_path="memory://dl-test/out"))
    from marin.storage import list_dir, read_bytes

    assert read_bytes("memory://dl-test/out/1.parquet") == b"p1"
    assert [u.rsplit("/", 1)[-1] for u in list_dir("memory://dl-test/out")] == [
        ".download",
        "1.parquet",
        "provenance.json",
    ]


@pytest.mark.usefixtures("ray_address")
def test_parallel_on_ray(tmp_path):
    files = {f"/d/{i}.bin": os.urandom(20_000 + i) for i in range(6)}
    with FileServer(files) as server:
        prov = download_dataset(
            DownloadConfig(
                source=f"{server.url}/d",
                files=tuple(f"{i}.bin" for i in range(6)),
                output_path=str(tmp_path / "o"),
                max_workers=3,
            )
        )
    assert [f["sha256"] for f in prov["files"]] == [sha(files[f"/d/{i}.bin"]) for i in range(6)]


def test_config_and_source_errors(tmp_path):
    with pytest.raises(ValueError, match=r"DownloadConfig.revision must be a commit, tag or branch .*got None"):
        DownloadConfig(source="hf://datasets/org/x", output_path="o")
    with pytest.raises(ValueError, match="DownloadConfig.revision must be None for non-hub sources"):
        DownloadConfig(source="file:///x", revision="main", output_path="o")
    with pytest.raises(ValueError, match="http\\(s\\) source cannot be listed"):
        download_dataset(cfg(source="http://127.0.0.1:9/dir/", output_path=str(tmp_path / "o")))
    with pytest.raises(FileNotFoundError, match="nothing at"):
        download_dataset(cfg(source=str(tmp_path / "missing"), output_path=str(tmp_path / "o")))
    with pytest.raises(ValueError, match="expected hf://datasets/<owner>/<name>"):
        download_dataset(cfg(source="hf://datasets/a/b/c", revision="main", output_path=str(tmp_path / "o")))
