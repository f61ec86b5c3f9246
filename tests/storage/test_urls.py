import pytest

from marin.storage.urls import is_absolute, like_url, object_store, scheme_of, split_bucket, split_url


@pytest.mark.parametrize(
    "url,scheme,rest",
    [("gs://b/a/b", "gs", "b/a/b"), ("/tmp/x", "", "/tmp/x"), ("rel/x", "", "rel/x"), ("memory:///x", "memory", "/x")],
)
def test_split_url(url, scheme, rest):
    assert split_url(url) == (scheme, rest) and scheme_of(url) == scheme


def test_split_bucket_and_store():
    assert split_bucket("s3://bucket/a/b.json") == ("s3", "bucket", "a/b.json")
    assert split_bucket("gs://bucket") == ("gs", "bucket", "")
    assert (object_store("gs://b/x"), object_store("s3a://b/x"), object_store("/tmp"), object_store("memory://x")) == (
        "gcs",
        "s3",
        None,
        None,
    )
    for bad in ("gs://", "/tmp/x"):
        with pytest.raises(ValueError, match="SCHEME://BUCKET/PATH"):
            split_bucket(bad)


def test_like_url_keeps_the_callers_form():
    assert like_url("gs://b/dir", "b/dir/x") == "gs://b/dir/x"
    assert like_url("/tmp/dir", "/tmp/dir/x") == "/tmp/dir/x"
    assert like_url("file:///tmp/dir", "/tmp/dir/x") == "file:///tmp/dir/x"
    assert like_url("memory:///d", "/d/x") == "memory:///d/x" and like_url("memory://d", "/d/x") == "memory://d/x"
    assert is_absolute("/a") and is_absolute("gs://b") and not is_absolute("a/b")
