"""JSONL query sets: what loads, and the errors that name file:line and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from evalpipe.datasets import DatasetError, load_jsonl


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "queries.jsonl"
    path.write_text(text, encoding="utf-8")
    return path


def test_rows_load_with_expectations(tmp_path: Path) -> None:
    """Rows keep their fields; expected_tool_calls become ExpectedToolCall; ids default to the line."""
    path = write(
        tmp_path,
        '# a comment\n{"query": "weather?", "expected_tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}\n'
        '\n{"id": "r2", "query": "hotels?", "expected_output": "Hotel", "tags": ["h"]}\n',
    )
    rows = load_jsonl(path)
    assert [r.id for r in rows] == ["line-2", "r2"]
    calls = rows[0].expected_tool_calls or []
    assert [(c.name, c.arguments) for c in calls] == [("get_weather", {"city": "Paris"})]
    assert rows[1].expected_output == "Hotel"
    assert rows[1].tags == ["h"]


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ('{"query": "a"}\n{"query": "b",}\n', ":2: invalid JSON"),
        (
            '{"query": "a", "expectd_output": "x"}\n',
            ":1: unknown column 'expectd_output' (known: agents, context, expected_output",
        ),
        ('{"query": ""}\n', ":1: query: String should have at least 1 character"),
        ('["a"]\n', ":1: expected a JSON object with a 'query', got list"),
        (
            '{"query": "a", "id": "x"}\n{"query": "b", "id": "x"}\n',
            ":2: id 'x' already used on line 1",
        ),
        (
            '{"query": "a", "expected_tool_calls": [{"arguments": {}}]}\n',
            ":1: expected_tool_calls.0.name: Field required",
        ),
        ("\n# only comments\n", "the dataset has no rows"),
    ],
)
def test_bad_rows_name_file_and_line(tmp_path: Path, text: str, fragment: str) -> None:
    """Each kind of bad input is reported with the file, the line and what is wrong."""
    path = write(tmp_path, text)
    with pytest.raises(DatasetError) as info:
        load_jsonl(path)
    assert str(info.value).startswith(str(path))
    assert fragment in str(info.value)


def test_missing_file_is_named(tmp_path: Path) -> None:
    """A missing dataset file is reported by path before anything runs."""
    with pytest.raises(DatasetError, match="no such dataset file"):
        load_jsonl(tmp_path / "nope.jsonl")
