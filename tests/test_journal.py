"""The run journal: content-addressed keys, records on disk at once, torn last lines skipped."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from evalpipe import FunctionCallContent, FunctionResultContent, Message
from evalpipe.journal import Journal, call_key
from evalpipe.transcripts import TargetRun, load_transcript


def test_keys_change_with_target_row_and_repetition() -> None:
    """A call's key depends on the target identity, the row's content hash and the repetition."""
    base = call_key("agent|x", "row1", 0)
    assert base == call_key("agent|x", "row1", 0)
    assert (
        len(
            {
                base,
                call_key("agent|y", "row1", 0),
                call_key("agent|x", "row2", 0),
                call_key("agent|x", "row1", 1),
            }
        )
        == 4
    )


def test_records_survive_a_new_process_view(tmp_path: Path) -> None:
    """What one Journal recorded, a fresh Journal on the same directory reads back."""
    with Journal(tmp_path, "agent|x") as journal:
        journal.record("k1", '{"a": 1}')
        journal.record("k2", '{"a": 2}')
        # written through at once: visible before close
        assert len(Journal(tmp_path, "agent|x")) == 2
    again = Journal(tmp_path, "agent|x")
    assert again.get("k1") == '{"a": 1}'
    assert "k2" in again
    assert again.get("k3") is None
    assert len(Journal(tmp_path, "agent|other")) == 0


def test_a_torn_last_line_is_skipped_and_the_next_record_starts_fresh(tmp_path: Path) -> None:
    """A line cut short by a crash is ignored; appending afterwards does not glue onto it."""
    with Journal(tmp_path, "t") as journal:
        journal.record("k1", "one")
    path = Journal(tmp_path, "t").path
    with path.open("ab") as fh:
        fh.write(b'{"key": "k2", "run": "tw')  # killed mid-write
    resumed = Journal(tmp_path, "t")
    assert resumed.skipped_lines == 1
    assert len(resumed) == 1
    resumed.record("k3", "three")
    resumed.close()
    final = Journal(tmp_path, "t")
    assert final.get("k3") == "three"
    assert final.get("k1") == "one"
    assert final.skipped_lines == 1


def _transcript_json() -> str:
    run = TargetRun(
        query_index=3,
        repetition=1,
        query='Wetter in "Köln"?\nbitte',
        messages=[
            Message(
                "assistant",
                [FunctionCallContent(name="get_weather", arguments={"city": "Köln"}, call_id="c1")],
            ),
            Message("tool", [FunctionResultContent(call_id="c1", result={"temp_c": 22})]),
            Message("assistant", ["Sonnig, 22 °C \u2014 \\o/"]),
        ],
    )
    return run.model_dump_json(fallback=str)


def test_a_transcript_is_written_into_its_line_as_it_is_and_read_back_as_the_same_text(
    tmp_path: Path,
) -> None:
    """The line holds the transcript's JSON object (not a string re-encoding it); get() gives
    back exactly the text that was recorded."""
    text = _transcript_json()
    with Journal(tmp_path, "t") as journal:
        journal.record("k1", text)
        assert journal.get("k1") == text
    line = Journal(tmp_path, "t").path.read_bytes()
    assert line.endswith(b"}\n")
    assert line.count(b"\n") == 1
    entry = json.loads(line)
    assert entry["key"] == "k1"
    assert isinstance(entry["finished_at"], float)
    assert entry["run"] == json.loads(text)
    again = Journal(tmp_path, "t")
    assert again.get("k1") == text
    assert load_transcript("agent", again.get("k1") or "") == TargetRun.model_validate_json(text)


def test_a_journal_written_in_the_old_format_is_read_and_resumed(tmp_path: Path) -> None:
    """Runs journaled before (the transcript as a JSON string) resume: their lines are read back,
    and new lines append after them."""
    text = _transcript_json()
    journal = Journal(tmp_path, "t")
    old = [
        json.dumps(
            {"key": key, "finished_at": 1.5, "run": run}, ensure_ascii=False, separators=(",", ":")
        )
        for key, run in (("old1", text), ("old2", "not json at all"))
    ]
    journal.path.parent.mkdir(parents=True, exist_ok=True)
    journal.path.write_text("\n".join(old) + "\n", encoding="utf-8")
    resumed = Journal(tmp_path, "t")
    assert len(resumed) == 2
    assert resumed.skipped_lines == 0
    assert resumed.get("old1") == text
    assert resumed.get("old2") == "not json at all"
    resumed.record("new", text)
    resumed.close()
    final = Journal(tmp_path, "t")
    assert sorted(final.keys()) == ["new", "old1", "old2"]
    assert final.get("new") == final.get("old1") == text


def test_a_text_that_is_not_one_object_on_one_line_is_stored_as_a_string(tmp_path: Path) -> None:
    texts = {"a": "one", "b": '{"a":\n1}', "c": "[1, 2]", "d": "", "e": '"}{"'}
    with Journal(tmp_path, "t") as journal:
        for key, text in texts.items():
            journal.record(key, text)
    again = Journal(tmp_path, "t")
    assert again.skipped_lines == 0
    assert {key: again.get(key) for key in texts} == texts


def test_a_torn_line_with_an_embedded_transcript_is_skipped_wherever_it_was_cut(
    tmp_path: Path,
) -> None:
    """Cut anywhere (after a nested object's brace too), the line is not read back; the calls
    before it are, and the next record starts on a fresh line."""
    text = _transcript_json()
    with Journal(tmp_path, "t") as journal:
        journal.record("k1", text)
        journal.record("k2", text)
    path = Journal(tmp_path, "t").path
    whole = path.read_bytes()
    second = whole.index(b'{"key":"k2"')
    cuts = [second + 5, second + 40, whole.index(b"}", second + 60) + 1, len(whole) - 2]
    for cut in cuts:
        path.write_bytes(whole[:cut])
        torn = Journal(tmp_path, "t")
        assert (len(torn), torn.skipped_lines) == (1, 1), cut
        assert torn.get("k1") == text
        torn.record("k3", text)
        torn.close()
        after = Journal(tmp_path, "t")
        assert after.get("k3") == text
        assert after.get("k1") == text
        assert "k2" not in after


def test_two_processes_appending_to_one_journal_each_read_their_own_lines(
    tmp_path: Path,
) -> None:
    """Dask workers of one run append to the same journal file: a line's place is where it was
    actually written, whatever the other wrote in between."""
    first, second = Journal(tmp_path, "t"), Journal(tmp_path, "t")
    for i in range(5):
        first.record(f"a{i}", f'{{"from":"first","i":{i}}}')
        second.record(f"b{i}", f'{{"from":"second","i":{i}}}')
    for i in range(5):
        assert first.get(f"a{i}") == f'{{"from":"first","i":{i}}}'
        assert second.get(f"b{i}") == f'{{"from":"second","i":{i}}}'
    first.close()
    second.close()
    assert len(Journal(tmp_path, "t")) == 10


class _ShortWrites:
    """A file that takes at most ``most`` bytes a write and refuses the write after ``writes``."""

    def __init__(self, handle: Any, most: int, writes: int = 1_000) -> None:
        self.handle = handle
        self.most = most
        self.writes = writes

    def write(self, data: Any) -> int:
        self.writes -= 1
        if self.writes < 0:
            raise OSError(28, "No space left on device")
        written: int = self.handle.write(bytes(data[: self.most]))
        return written

    def tell(self) -> int:
        position: int = self.handle.tell()
        return position

    def close(self) -> None:
        self.handle.close()


def test_record_many_writes_the_lines_record_writes_and_finishes_short_writes(
    tmp_path: Path,
) -> None:
    """Lines recorded together read back as lines recorded one by one (in this view and a new
    one), a short write is carried on where it stopped, and when the disk fills mid-batch the
    lines written in full are kept and the error is raised."""
    runs = [(f"k{i}", json.dumps({"i": i, "text": "é" * i})) for i in range(6)]
    journal = Journal(tmp_path, "agent|x")
    journal.record("k-first", '{"first": true}')
    journal._handle = _ShortWrites(journal._handle, most=7)
    journal.record_many(runs[:3])
    journal._handle = _ShortWrites(journal._handle.handle, most=30, writes=2)
    with pytest.raises(OSError, match="No space"):
        journal.record_many(runs[3:])
    written = [k for k, _ in runs if k in journal]
    assert written[:3] == ["k0", "k1", "k2"]
    for view in (journal, Journal(tmp_path, "agent|x")):
        assert view.get("k-first") == '{"first": true}'
        for key, text in runs:
            if key in written:
                assert view.get(key) == text
    again = Journal(tmp_path, "agent|x")
    keys = list(again.keys())
    assert keys == ["k-first", *written]
    assert again.skipped_lines == 1  # the line the disk cut short


def test_the_lines_of_one_write_share_their_finishing_time(tmp_path: Path) -> None:
    """record_many stamps its lines with one time (they are written together), each line
    otherwise as record writes it: the key, the time, the transcript."""
    runs = [(f"k{i}", json.dumps({"i": i})) for i in range(3)]
    with Journal(tmp_path, "t") as journal:
        journal.record_many(runs)
        path = journal.path
    entries = [json.loads(line) for line in path.read_bytes().splitlines()]
    assert len({e["finished_at"] for e in entries}) == 1
    assert [(e["key"], json.dumps(e["run"])) for e in entries] == runs
    lines = path.read_bytes().decode().splitlines()
    stamp = entries[0]["finished_at"]
    assert lines == [f'{{"key":"{k}","finished_at":{stamp!r},"run":{r}}}' for k, r in runs]
