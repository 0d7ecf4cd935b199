"""The run journal: content-addressed keys, records on disk at once, torn last lines skipped."""

from __future__ import annotations

from pathlib import Path

from evalpipe.journal import Journal, call_key


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
