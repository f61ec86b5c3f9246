"""One shard writer for both token caches (issue 36, item 16): the special-string policy, the shard's
ledger and the rerun's completeness check live in ``marin.tokenize.shards``, whichever builder calls it."""

import json

import numpy as np
import pytest

from marin.tokenize.shards import ShardSpec, ShardWriter, cache_totals, plan_shards

ROWS = ["plain one", "quotes <|endoftext|>", "plain two", "<|eot_id|> forged"]


def holds_special(row: str) -> bool:
    return "<|" in row


def write_shard(spec: ShardSpec, rows=ROWS, streams=("tokens", "mask"), fail_after=None) -> dict:
    shard = ShardWriter(spec, np.dtype("<u2"), streams=streams)
    with shard:
        for i, row in enumerate(shard.admit(rows, holds_special)):
            if i == fail_after:
                raise OSError("disk full")
            ids = np.frombuffer(row.encode(), dtype=np.uint8).astype("<u2")
            shard.add(tokens=ids, mask=(ids % 2).astype(np.uint8))
    return shard.finish(tokenizer_fingerprint="fp")


@pytest.mark.parametrize("policy", ["text", "drop"])
def test_the_policy_is_counted_and_applied_in_the_shard_ledger(tmp_path, policy):
    spec = ShardSpec(0, "rows.jsonl", str(tmp_path), special_strings=policy)
    ledger = write_shard(spec)
    kept = ROWS if policy == "text" else ["plain one", "plain two"]
    assert ledger["special_strings"] == policy and ledger["special_string_documents"] == 2
    assert ledger["dropped_documents"] == len(ROWS) - len(kept) and ledger["num_documents"] == len(kept)
    assert bytes(np.fromfile(spec.paths["tokens"], dtype="<u2").astype(np.uint8)).decode() == "".join(kept)
    assert json.loads(open(spec.paths["ledger"]).read()) == ledger
    assert cache_totals([ledger, ledger])["special_string_documents"] == 4


def test_a_rerun_keeps_finished_shards_and_rebuilds_the_rest(tmp_path):
    files = ["a.jsonl", "b.jsonl", "c.jsonl", "d.jsonl"]
    options = {"special_strings": "drop"}
    specs = [ShardSpec(i, f, str(tmp_path), **options) for i, f in enumerate(files)]
    write_shard(specs[0])
    write_shard(ShardSpec(1, "b.jsonl", str(tmp_path), special_strings="text"))  # another policy
    with pytest.raises(OSError, match="disk full"):
        write_shard(specs[2], fail_after=1)  # a failed shard: nothing moved into place, no ledger
    write_shard(specs[3])
    with open(specs[3].paths["mask"], "ab") as f:
        f.write(b"\0")  # a shard file that is not the size its ledger promises
    done, todo = plan_shards(files, str(tmp_path), {"tokenizer_fingerprint": "fp"}, ("tokens", "mask"), **options)
    assert list(done) == [0] and [s.index for s in todo] == [1, 2, 3]
    assert not (tmp_path / "shards" / "00002.tokens").exists()
    done, todo = plan_shards(files, str(tmp_path), {"tokenizer_fingerprint": "other"}, **options)
    assert done == {} and len(todo) == 4
