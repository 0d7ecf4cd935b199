"""The response cache: keys, record/replay/off, expiry, the replay-miss explanation, atomic writes."""

from __future__ import annotations

import json
import threading
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from evalpipe.cache import (
    CacheError,
    CacheMissError,
    ResponseCache,
    cache_clean,
    cache_stats,
    request_key,
)


def request(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "model": "qwen3:4b",
        "messages": [
            {"role": "system", "content": "Answer in three sentences.\nBe kind."},
            {"role": "user", "content": "How long do I have to return a jacket?"},
        ],
        "temperature": 0.0,
        "seed": 42,
        "repetition": 0,
    }
    base.update(overrides)
    return base


RESPONSE = {
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "30 days."}}],
    "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15},
}


def test_key_ignores_line_endings() -> None:
    """CRLF and CR line endings give the same key as LF (a Windows checkout still hits)."""
    crlf = request()
    crlf["messages"][0]["content"] = "Answer in three sentences.\r\nBe kind."
    cr = request()
    cr["messages"][0]["content"] = "Answer in three sentences.\rBe kind."
    assert request_key(crlf) == request_key(request()) == request_key(cr)


def test_key_changes_with_one_word_model_seed_or_repetition() -> None:
    """One word of a prompt, the model id, the seed and the repetition index each change the key."""
    one_word = request()
    one_word["messages"][0]["content"] = "Answer in two sentences.\nBe kind."
    keys = {
        request_key(request()),
        request_key(one_word),
        request_key(request(model="qwen3:8b")),
        request_key(request(seed=7)),
        request_key(request(repetition=1)),
    }
    assert len(keys) == 5


def test_key_ignores_dict_order() -> None:
    """The key is over canonical JSON, so the order of fields does not matter."""
    reordered = dict(reversed(list(request().items())))
    assert request_key(reordered) == request_key(request())


def test_record_miss_then_hit_keeps_usage(tmp_path: Path) -> None:
    """In record mode a miss returns None, put stores the entry, and the next get returns it with usage."""
    cache = ResponseCache(tmp_path)
    assert cache.get(request()) is None
    stored = cache.put(request(), RESPONSE, usage={"input_tokens": 12}, latency_s=0.5)
    assert stored is not None
    hit = cache.get(request())
    assert hit is not None
    assert hit.response == RESPONSE
    assert hit.usage == {"input_tokens": 12}
    assert hit.key == stored.key == request_key(request())
    path = cache.path_for(hit.key)
    assert path.parent.name == hit.key[:2]
    on_disk = json.loads(path.read_text())
    assert {"key", "created", "expires", "request", "response", "usage"} <= on_disk.keys()


def test_expired_entry_is_a_miss_and_clean_drops_it(tmp_path: Path) -> None:
    """An entry past its TTL is a miss in record mode, counted as expired, and removed by cache_clean."""
    ResponseCache(tmp_path, ttl=timedelta(0)).put(request(), RESPONSE)
    ResponseCache(tmp_path).put(request(seed=1), RESPONSE)
    assert ResponseCache(tmp_path).get(request()) is None
    stats = cache_stats(tmp_path)
    assert (stats.entries, stats.expired, stats.unreadable) == (2, 1, 0)
    assert stats.bytes > 0
    assert stats.oldest is not None
    assert stats.newest is not None
    assert stats.oldest <= stats.newest
    assert cache_clean(tmp_path) == 1
    assert (cache_stats(tmp_path).entries, cache_stats(tmp_path).expired) == (1, 0)


def test_expired_entry_in_replay_names_the_expiry(tmp_path: Path) -> None:
    """In replay mode an expired entry raises CacheMissError saying when it expired."""
    ResponseCache(tmp_path, ttl=timedelta(0)).put(request(), RESPONSE)
    with pytest.raises(CacheMissError, match="expired at"):
        ResponseCache(tmp_path, mode="replay").get(request())


def test_replay_miss_names_key_and_differing_seed(tmp_path: Path) -> None:
    """A replay miss names the key and, for the same model and messages, the parameter that differs."""
    ResponseCache(tmp_path).put(request(), RESPONSE)
    replay = ResponseCache(tmp_path, mode="replay")
    with pytest.raises(CacheMissError) as info:
        replay.get(request(seed=7))
    text = str(info.value)
    assert request_key(request(seed=7)) in text
    assert "seed is 7 (stored: 42)" in text
    assert "messages" not in info.value.difference


def test_replay_miss_names_first_differing_message(tmp_path: Path) -> None:
    """A replay miss for a changed prompt names the message index and the differing text."""
    ResponseCache(tmp_path).put(request(), RESPONSE)
    changed = request()
    changed["messages"][1]["content"] = "How long do I have to return a tent?"
    with pytest.raises(CacheMissError) as info:
        ResponseCache(tmp_path, mode="replay").get(changed)
    assert "messages[1] (user) content differs at character 31" in info.value.difference
    assert "tent" in info.value.difference
    assert "jacket" in info.value.difference


def test_replay_miss_picks_nearest_stored_request(tmp_path: Path) -> None:
    """The explanation compares with the stored request of the same model, not another model's."""
    cache = ResponseCache(tmp_path)
    cache.put(request(model="other-model", seed=1), RESPONSE)
    cache.put(request(), RESPONSE)
    with pytest.raises(CacheMissError) as info:
        ResponseCache(tmp_path, mode="replay").get(request(repetition=2))
    assert info.value.difference.endswith("repetition is 2 (stored: 0)")


def test_replay_with_empty_directory_says_so(tmp_path: Path) -> None:
    """A replay miss on an empty cache says the directory holds no entries."""
    with pytest.raises(CacheMissError, match="holds no entries"):
        ResponseCache(tmp_path / "none", mode="replay").get(request())


def test_off_mode_never_reads_or_writes(tmp_path: Path) -> None:
    """Mode off returns None from get and writes nothing on put."""
    ResponseCache(tmp_path).put(request(), RESPONSE)
    off = ResponseCache(tmp_path, mode="off")
    assert off.get(request()) is None
    assert off.put(request(seed=3), RESPONSE) is None
    assert cache_stats(tmp_path).entries == 1


def test_replay_mode_does_not_write(tmp_path: Path) -> None:
    """Mode replay never stores a new entry."""
    assert ResponseCache(tmp_path, mode="replay").put(request(), RESPONSE) is None
    assert cache_stats(tmp_path).entries == 0


def test_corrupt_entry_is_rerecorded_in_record_mode_and_an_error_in_replay(tmp_path: Path) -> None:
    """A half-written or edited entry is a miss in record mode and a CacheError naming the file in replay."""
    cache = ResponseCache(tmp_path)
    path = cache.path_for(request_key(request()))
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    assert cache.get(request()) is None
    assert cache_stats(tmp_path).unreadable == 1
    with pytest.raises(CacheError, match=path.name):
        ResponseCache(tmp_path, mode="replay").get(request())
    assert cache_clean(tmp_path) == 0  # unreadable files are left alone
    cache.put(request(), RESPONSE)
    assert cache.get(request()) is not None


def test_concurrent_writers_leave_only_whole_entries(tmp_path: Path) -> None:
    """Eight threads writing the same and different keys leave valid entries and no temp files."""
    cache = ResponseCache(tmp_path)
    errors: list[BaseException] = []

    def writer(n: int) -> None:
        try:
            for i in range(25):
                cache.put(request(seed=i % 5), {**RESPONSE, "writer": n})
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not errors
    stats = cache_stats(tmp_path)
    assert (stats.entries, stats.unreadable) == (5, 0)
    assert not list(tmp_path.rglob("*.tmp"))


def test_missing_directory_stats_are_zero(tmp_path: Path) -> None:
    """cache_stats and cache_clean on a directory that does not exist report nothing, without error."""
    stats = cache_stats(tmp_path / "absent")
    assert (stats.entries, stats.bytes, stats.oldest) == (0, 0, None)
    assert cache_clean(tmp_path / "absent") == 0


def test_bad_mode_and_negative_ttl_are_rejected(tmp_path: Path) -> None:
    """An unknown mode or a negative TTL is a ValueError naming the problem."""
    with pytest.raises(ValueError, match="cache mode must be"):
        ResponseCache(tmp_path, mode="replayy")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="ttl must not be negative"):
        ResponseCache(tmp_path, ttl=timedelta(seconds=-1))
