"""JSONL query sets: what loads, and the errors that name file:line and the fix."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

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
            ":1: unknown column 'expectd_output' (known: agents, context, conversation, expected_output",
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


# --- CSV and Parquet ---------------------------------------------------------------------------


def test_csv_rows_with_json_cells_and_comma_tags(tmp_path: Path) -> None:
    """CSV cells for lists/objects hold JSON; tags may be comma-separated; empty cells are absent."""
    from evalpipe.datasets import load_dataset

    path = tmp_path / "q.csv"
    path.write_text(
        "id,query,expected_output,expected_tool_calls,tags,agents\n"
        'a,Weather in Paris?,sunny,"[{""name"": ""get_weather"", ""arguments"": {""city"": ""Paris""}}]","weather, eu",\n'
        ',Hotels?,,,,"{""writer"": {""expected_output"": ""Sakura""}}"\n',
        encoding="utf-8",
    )
    rows = load_dataset(path)
    assert rows[0].id == "a"
    assert rows[0].tags == ["weather", "eu"]
    assert rows[0].expected_tool_calls is not None
    assert rows[0].expected_tool_calls[0].name == "get_weather"
    assert rows[1].id == "line-3"
    assert rows[1].expected_output is None
    assert rows[1].agents is not None
    assert rows[1].agents["writer"].expected_output == "Sakura"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("query,expectd\nx,y\n", r"q\.csv:1: unknown column 'expectd'"),
        (
            'query,expected_tool_calls\nx,"[{bad"\n',
            r"q\.csv:2: column 'expected_tool_calls' holds invalid JSON",
        ),
        ("query,tags\n,a\n", r"q\.csv:2: query: Field required"),
        ("query\nx,y\n", r"q\.csv:2: more cells than header columns"),
        ("", r"the file is empty"),
    ],
)
def test_csv_errors_name_file_and_line(tmp_path: Path, text: str, message: str) -> None:
    """Every CSV problem names file:line and what to change."""
    from evalpipe.datasets import load_dataset

    path = tmp_path / "q.csv"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(DatasetError, match=message):
        load_dataset(path)


def test_parquet_rows_native_and_json_columns(tmp_path: Path) -> None:
    """Parquet rows take nested columns natively or as JSON strings; errors name the row."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from evalpipe.datasets import load_dataset

    path = tmp_path / "q.parquet"
    pq.write_table(
        pa.table(
            {
                "query": ["a?", "b?"],
                "tags": [["x"], []],
                "expected_tool_calls": ['[{"name": "t"}]', None],
            }
        ),
        path,
    )
    rows = load_dataset(path)
    assert [r.id for r in rows] == ["row-1", "row-2"]
    assert rows[0].expected_tool_calls is not None
    assert rows[0].expected_tool_calls[0].name == "t"
    bad = tmp_path / "bad.parquet"
    pq.write_table(pa.table({"query": ["a", ""]}), bad)
    with pytest.raises(DatasetError, match=r"bad\.parquet:row 2: query"):
        load_dataset(bad)
    with pytest.raises(DatasetError, match=r"unknown dataset format '\.txt'"):
        load_dataset(tmp_path / "q.txt")


def test_row_hash_includes_the_id_and_the_content() -> None:
    """The row hash (the journal's key part) changes with the id, the query or the expectations:
    rows that differ only in id are two samples (regression: they shared one target call)."""
    from evalpipe.datasets import QueryRow, row_hash

    a = QueryRow(query="q", id="1", expected_output="x")
    assert row_hash(a) == row_hash(a.model_copy())
    assert row_hash(a) != row_hash(a.model_copy(update={"id": "2"}))
    assert row_hash(a) != row_hash(a.model_copy(update={"expected_output": "y"}))


# --- recorded rows ---------------------------------------------------------------------------

OPENAI_CONVERSATION = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather in Paris?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "18C"},
    {"role": "assistant", "content": "18C in Paris."},
]


def test_recorded_row_derives_query_and_reads_tools(tmp_path: Path) -> None:
    """A JSONL row with only a conversation gets its query from the last user message; its tools
    (OpenAI or plain shape) become definitions; the conversation is stored as evalpipe Messages."""
    import json

    tools = [{"type": "function", "function": {"name": "get_weather", "description": "w"}}]
    path = write(tmp_path, json.dumps({"conversation": OPENAI_CONVERSATION, "tools": tools}) + "\n")
    (row,) = load_jsonl(path)
    assert row.query == "Weather in Paris?"
    assert row.recorded
    assert [m.role for m in row.conversation or []] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
    ]
    assert [t.name for t in row.tools or []] == ["get_weather"]


def test_recorded_agents_rows_and_their_errors(tmp_path: Path) -> None:
    """recorded_agents entries read in the file's format; a bad entry names file:line and path."""
    import json

    entry = {
        "agent": "researcher",
        "received": [{"role": "user", "content": "Find hotels"}],
        "produced": [{"role": "assistant", "content": "Hotel Lumiere."}],
    }
    path = write(tmp_path, json.dumps({"recorded_agents": [entry]}) + "\n")
    (row,) = load_jsonl(path)
    assert row.query == "Find hotels"
    assert row.recorded_agents is not None
    assert row.recorded_agents[0].produced[0].text == "Hotel Lumiere."
    bad = {**entry, "produced": [{"role": "assistant", "text": "x"}]}
    path = write(tmp_path, '{"query": "q"}\n' + json.dumps({"recorded_agents": [bad]}) + "\n")
    with pytest.raises(
        DatasetError,
        match=r":2: the recording fits no message format.*"
        r"recorded_agents\[0\]\.produced\[0\]",
    ):
        load_jsonl(path)
    path = write(tmp_path, json.dumps({"recorded_agents": [{**entry, "agnt": "x"}]}) + "\n")
    with pytest.raises(DatasetError, match=r":1: unknown column 'recorded_agents\.0\.agnt'"):
        load_jsonl(path)


def test_recorded_row_without_any_user_message_needs_a_query(tmp_path: Path) -> None:
    """A recording with no user message and no query is refused with what to add."""
    import json

    conversation = [{"role": "assistant", "content": "Hello."}]
    path = write(tmp_path, json.dumps({"conversation": conversation}) + "\n")
    with pytest.raises(DatasetError, match=r":1: .*no user message with text.*add a 'query'"):
        load_jsonl(path)
    path = write(tmp_path, json.dumps({"query": "hi", "conversation": conversation}) + "\n")
    assert load_jsonl(path)[0].query == "hi"


def test_recorded_rows_in_csv_and_native_parquet(tmp_path: Path) -> None:
    """CSV cells hold recordings as JSON; Parquet holds them natively (nulls from struct unions are
    dropped) or as JSON strings."""
    import csv
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    from evalpipe.datasets import load_dataset

    path = tmp_path / "r.csv"
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["id", "conversation"])
        writer.writerow(["a", json.dumps(OPENAI_CONVERSATION)])
    (row,) = load_dataset(path)
    assert row.query == "Weather in Paris?"
    assert row.conversation is not None
    assert row.conversation[2].function_calls[0].name == "get_weather"

    native = tmp_path / "r.parquet"
    pq.write_table(pa.table({"conversation": [OPENAI_CONVERSATION]}), native)
    assert pa.types.is_list(pq.read_schema(native).field("conversation").type)
    (row,) = load_dataset(native)
    assert row.conversation is not None
    assert [m.role for m in row.conversation][-2:] == ["tool", "assistant"]
    assert row.conversation[3].function_results[0].result == "18C"


def test_row_hash_includes_the_recording() -> None:
    """A changed recording is a new row (its hash changes); a QueryRow built in code detects its
    recording's format itself."""
    from evalpipe.datasets import QueryRow, row_hash

    a = QueryRow.model_validate({"conversation": OPENAI_CONVERSATION})
    changed = [*OPENAI_CONVERSATION[:-1], {"role": "assistant", "content": "20C in Paris."}]
    b = QueryRow.model_validate({"conversation": changed})
    assert a.query == b.query
    assert row_hash(a) != row_hash(b)


def test_write_jsonl_replaces_the_file_only_with_rows_that_load(tmp_path: Path) -> None:
    """write_jsonl writes rows that load back; rows that do not load leave the old file as it was
    (no .tmp left behind), and a path not named *.jsonl is refused."""
    from evalpipe.datasets import write_jsonl

    path = tmp_path / "out" / "rows.jsonl"
    rows = write_jsonl([{"id": "a", "query": "q1"}, {"id": "b", "query": "q2"}], path)
    assert [r.id for r in rows] == ["a", "b"]
    before = path.read_text(encoding="utf-8")
    with pytest.raises(DatasetError, match=r"rows\.jsonl:2: .*quer"):
        write_jsonl([{"id": "c", "query": "ok"}, {"id": "d", "quer": "typo"}], path)
    assert path.read_text(encoding="utf-8") == before
    assert not (tmp_path / "out" / "rows.jsonl.tmp").exists()
    with pytest.raises(DatasetError, match=r"rows\.json: .*name it \*\.jsonl"):
        write_jsonl([{"query": "q"}], tmp_path / "rows.json")


def test_a_recorded_conversation_without_an_answer_is_refused(tmp_path: Path) -> None:
    """Regression: a recorded conversation with no assistant message was scored as an empty
    answer (and could pass). It is refused naming the line."""
    from evalpipe.datasets import DatasetError, load_jsonl

    path = tmp_path / "rec.jsonl"
    row = {
        "conversation": [{"role": "user", "content": "hi"}, {"role": "user", "content": "again"}]
    }
    path.write_text(json.dumps(row) + "\n", encoding="utf-8")
    with pytest.raises(
        DatasetError, match=r"rec.jsonl:1: the recorded conversation has no assistant message"
    ):
        load_jsonl(path)


def test_a_dataset_that_is_not_utf8_names_the_line(tmp_path: Path) -> None:
    """Non-UTF-8 bytes in a JSONL or CSV dataset name the file, line and column."""
    from evalpipe.datasets import DatasetError, load_dataset, load_jsonl

    jsonl = tmp_path / "q.jsonl"
    jsonl.write_bytes(b'{"query": "a"}\n{"query": "caf\xe9"}\n')
    with pytest.raises(DatasetError, match=r"q.jsonl:2:15: not UTF-8 \(byte 0xe9\)"):
        load_jsonl(jsonl)
    csv_file = tmp_path / "q.csv"
    csv_file.write_bytes(b"query\nfine\ncaf\xe9\n")
    with pytest.raises(DatasetError, match=r"q.csv:3:4: not UTF-8 \(byte 0xe9\)"):
        load_dataset(csv_file)


def test_jsonl_rows_load_as_json_loads_reads_them(tmp_path: Path) -> None:
    """The fast parser gives json.loads's values (big ints, NaN, duplicate keys, a lone surrogate
    escape it refuses), and line numbers count only "\\n" (a "\\r" inside a line does not cut it)."""
    from evalpipe.datasets import QueryRow

    lines = [
        '{"query": "a", "context": "x", "context": "y", "tags": ["t"]}',
        '{"query": "caf\\u00e9", "expected_tool_calls": [{"name": "f", "arguments": '
        '{"n": 123456789012345678901234567890, "s": "\\ud800", "g": 1.0000000000000002}}]}',
        "# a comment",
        "",
        '{"query": "line\\r with a CR"}\r',
    ]
    path = write(tmp_path, "\n".join(lines) + "\n")
    rows = load_jsonl(path)
    expected = [
        QueryRow.model_validate({"id": f"line-{n}", **json.loads(lines[n - 1])}) for n in (1, 2, 5)
    ]
    assert [r.model_dump() for r in rows] == [e.model_dump() for e in expected]
    assert rows[0].context == "y"
    args = rows[1].expected_tool_calls[0].arguments  # type: ignore[index]
    assert args == {"n": 123456789012345678901234567890, "s": "\ud800", "g": 1.0000000000000002}
    nan = write(
        tmp_path,
        '{"query": "a", "expected_tool_calls": [{"name": "f", "arguments": {"x": NaN}}]}\n',
    )
    (row,) = load_jsonl(nan)
    value = row.expected_tool_calls[0].arguments["x"]  # type: ignore[index]
    assert value != value
    assert [r.id for r in rows] == ["line-1", "line-2", "line-5"]
    bad = write(tmp_path, '{"query": "a"}\r{"query": "b"}\n{"query": "c",}\n')
    with pytest.raises(DatasetError, match=r"queries\.jsonl:1: invalid JSON"):
        load_jsonl(bad)


def test_row_hash_is_the_content_key_of_the_row() -> None:
    """row_hash keeps journal.content_key's canonical JSON: a journal written before resumes."""
    from evalpipe.datasets import QueryRow, row_hash
    from evalpipe.journal import content_key

    rows = [
        QueryRow(query="q", id="1"),
        QueryRow.model_validate(
            {
                "query": "naïve ☃",
                "id": "z",
                "expected_output": "a\nb",
                "expected_tool_calls": [{"name": "f", "arguments": {"b": [1, 2.5], "a": None}}],
                "tags": ["x", "y"],
                "agents": {"writer": {"expected_output": "w"}},
                "context": "c",
            }
        ),
    ]
    for row in rows:
        assert row_hash(row) == content_key(row.model_dump(mode="json", exclude_none=True))


_KNOWN_HASHES = [
    (
        {
            "id": "q0",
            "query": "What's the weather in Paris? (0)",
            "expected_output": "sunny",
            "expected_tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}],
        },
        "4490cf96d80fb2e1c4cad1e61abbf03f",
    ),
    ({"query": "q", "id": "line-1"}, "466f0a1898ca8f8d64b2eb3cc5c9fb79"),
    (
        {
            "query": 'naïve ☃ \u2028 "quoted" \\ back\ttab\x01',
            "id": "z",
            "expected_output": "a\nb",
            "context": "c",
            "tags": ["x", "y"],
            "expected_tool_calls": [
                {
                    "name": "f",
                    "arguments": {
                        "b": [1, 2.5, -0.0, 1e300, True, None],
                        "a": None,
                        "é": {"z": 2**70, "a": []},
                    },
                },
                {"name": "g"},
                {"name": "h", "arguments": {}},
            ],
        },
        "4fedbc5b452b4f4668df30ada8ed0992",
    ),
    (
        {"query": "q", "id": "w", "agents": {"writer": {"expected_output": "w"}}},
        "0515d45cd8e92677b99916b01be15a78",
    ),
    (
        {
            "query": "q",
            "id": "nan",
            "expected_tool_calls": [
                {"name": "f", "arguments": {"x": float("nan"), "y": float("inf")}}
            ],
        },
        "c148b94acfe26c578f74ab94a870548b",
    ),
    (
        {
            "id": "rec",
            "conversation": [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "hello"},
            ],
        },
        "bbc2aec624b727ab0f73aaecf4f58e8f",
    ),
]
"""Rows and the hashes evalpipe gave them before row_hash's encoder changed (cb9e017): a journal
keys its calls by them, so a changed hash would silently re-make every call of a run."""


@pytest.mark.parametrize(("data", "expected"), _KNOWN_HASHES)
def test_row_hash_is_the_known_hash_of_the_row(data: dict[str, Any], expected: str) -> None:
    """row_hash gives the hashes earlier evalpipe versions gave the same rows, byte for byte."""
    from evalpipe.datasets import QueryRow, row_hash

    assert row_hash(QueryRow.model_validate(data)) == expected


def test_rows_validated_at_once_are_the_rows_validated_one_by_one(tmp_path: Path) -> None:
    """A file's rows (without ids, with a null id, with their own) are the rows model_validate
    gives one at a time, ids defaulted to the line."""
    from evalpipe.datasets import QueryRow

    lines = [
        {"query": "a"},
        {"query": "b", "id": None, "tags": ["t"]},
        {"query": "c", "id": "x", "expected_tool_calls": [{"name": "f"}]},
        {"query": "d", "agents": {"w": {"expected_output": "o"}}, "context": "k"},
    ]
    path = tmp_path / "rows.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n", encoding="utf-8")
    rows = load_jsonl(path)
    expected = [QueryRow.model_validate(line) for line in lines]
    for index, row in enumerate(expected):
        if row.id is None:
            row.id = f"line-{index + 1}"
    assert rows == expected
    assert [r.id for r in rows] == ["line-1", "line-2", "x", "line-4"]


def test_the_first_bad_row_is_named_when_several_are_bad(tmp_path: Path) -> None:
    """With rows validated at once, the error still names the first bad line, and only it."""
    path = tmp_path / "rows.jsonl"
    path.write_text(
        '{"query": "ok"}\n{"query": "a", "id": "a"}\n{"query": ""}\n{"querry": "x"}\n'
        '{"query": "b", "id": "a"}\n',
        encoding="utf-8",
    )
    with pytest.raises(DatasetError) as info:
        load_jsonl(path)
    message = str(info.value)
    assert message.startswith(f"{path}:3: query: ")
    assert ":4:" not in message
    assert ":5:" not in message


def _jsonl_of(tmp_path: Path, rows: list[dict[str, Any]], name: str = "rows.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_plain_rows_load_with_the_known_hashes(tmp_path: Path) -> None:
    """load_rows reads the plain rows without QueryRow models and gives them the hashes evalpipe
    always gave them (a journal keys its calls by them); the other rows stay QueryRows."""
    from evalpipe.datasets import PlainRow, QueryRow, load_rows

    rows = load_rows(_jsonl_of(tmp_path, [data for data, _ in _KNOWN_HASHES]))
    assert [r.key if isinstance(r, PlainRow) else None for r in rows][:4] == [
        expected for _, expected in _KNOWN_HASHES[:3]
    ] + [None]
    assert [type(r) for r in rows] == [PlainRow] * 3 + [QueryRow, PlainRow, QueryRow]
    from evalpipe.datasets import row_hash

    assert [row_hash(r) for r in rows] == [expected for _, expected in _KNOWN_HASHES]


_MIXED: list[dict[str, Any]] = [
    {"query": "a"},
    {"query": "b", "id": None, "expected_output": None, "context": None, "tags": []},
    {"query": "c", "id": "c", "expected_output": "x", "context": "ctx", "tags": ["t", "u"]},
    {"query": "d", "expected_tool_calls": [{"name": "f", "arguments": {"n": 1}}]},
    {"query": "e", "expected_tool_calls": [{"arguments": {"n": 1}, "name": "f"}]},
    {"query": "f", "expected_tool_calls": [{"name": "f", "arguments": {"n": 1.0}}]},
    {"query": "g", "expected_tool_calls": [{"name": "f", "arguments": {"n": True}}]},
    {"query": "h", "expected_tool_calls": [{"name": "f", "arguments": {"n": 1}}]},
    {"query": "i", "expected_tool_calls": [{"name": "f", "arguments": None}, {"name": "g"}]},
    {"query": "j", "expected_tool_calls": [{"name": "f", "arguments": {"x": float("nan")}}]},
    {"query": "k", "expected_tool_calls": []},
    {"query": "l", "expected_tool_calls": [{"name": "f", "arguments": {"a": None, "b": [None]}}]},
    {"query": "m", "agents": {"writer": {"expected_output": "w"}}},
    {
        "query": "n",
        "conversation": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}],
    },
    {"query": "o", "id": "o2", "tools": [{"name": "t"}]},
    {"query": "☃ naïve \u2028", "id": "p", "tags": ["é"]},
]
"""Plain rows of every shape (absent and null fields, calls in either key order, 1 / 1.0 / true,
null and missing arguments, NaN, nested nulls, no calls) among rows that are not plain."""


def _same_row(plain: Any, model: Any) -> None:
    from evalpipe.datasets import PlainRow, row_hash

    if not isinstance(plain, PlainRow):
        assert plain == model
        return
    assert (plain.query, plain.id, plain.expected_output, plain.context) == (
        model.query,
        model.id,
        model.expected_output,
        model.context,
    )
    assert plain.tags == tuple(model.tags)
    assert plain.key == row_hash(model)
    ours, theirs = plain.expected_tool_calls, model.expected_tool_calls
    assert (ours is None) == (theirs is None)
    if ours is not None and theirs is not None:  # the same values, of the same JSON types
        assert [c.model_dump_json() for c in ours] == [c.model_dump_json() for c in theirs]
        assert [type(c) for c in ours] == [type(c) for c in theirs]
    assert (plain.agents, plain.conversation, plain.tools, plain.recorded_agents) == (
        model.agents,
        model.conversation,
        model.tools,
        model.recorded_agents,
    )
    assert plain.recorded is model.recorded


def test_plain_rows_are_their_query_rows(tmp_path: Path) -> None:
    """A PlainRow holds what the row's QueryRow holds (same values, same JSON types of the
    expected arguments) and its row_hash; rows that are not plain come as their QueryRows."""
    from evalpipe.datasets import PlainRow, load_dataset, load_rows

    path = _jsonl_of(tmp_path, _MIXED)
    plain, models = load_rows(path), load_dataset(path)
    assert [isinstance(r, PlainRow) for r in plain] == [i < 12 or i == 15 for i in range(16)]
    assert len(plain) == len(models)
    for ours, theirs in zip(plain, models, strict=True):
        _same_row(ours, theirs)
    csv_file = tmp_path / "rows.csv"
    csv_file.write_text(
        'id,query,expected_tool_calls,tags\n1,q,"[{""name"": ""f""}]","a, b"\n,r,,\n',
        encoding="utf-8",
    )
    csv_rows = load_rows(csv_file)
    assert all(isinstance(r, PlainRow) for r in csv_rows)
    for ours, theirs in zip(csv_rows, load_dataset(csv_file), strict=True):
        _same_row(ours, theirs)


def test_plain_rows_share_equal_expected_calls_only(tmp_path: Path) -> None:
    """Rows whose expected calls are written the same share one list; 1, 1.0 and true (equal in
    Python, not in JSON) and a different key order do not."""
    from evalpipe.datasets import PlainRow, load_rows

    rows = [r for r in load_rows(_jsonl_of(tmp_path, _MIXED)) if isinstance(r, PlainRow)]
    d, e, f, g, h = rows[3:8]
    assert d.expected_tool_calls is h.expected_tool_calls
    assert len({id(r.expected_tool_calls) for r in (d, e, f, g)}) == 4


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"query": ""}, "query: String should have at least 1 character"),
        ({"query": 3}, "query: Input should be a valid string"),
        ({"query": "q", "id": 3}, "id: Input should be a valid string"),
        ({"query": "q", "tags": "a"}, "tags: Input should be a valid list"),
        ({"query": "q", "tags": None}, "tags: Input should be a valid list"),
        ({"query": "q", "expected_output": 1}, "expected_output: Input should be a valid string"),
        ({"query": "q", "expected_tool_calls": [{"name": 3}]}, "expected_tool_calls.0.name"),
        (
            {"query": "q", "expected_tool_calls": [{"nom": "f"}]},
            "expected_tool_calls.0.name: Field",
        ),
        ({"query": "q", "expected_tool_calls": {"name": "f"}}, "expected_tool_calls: Input"),
        ({"query": "q", "colour": "red"}, "unknown column 'colour'"),
    ],
)
def test_a_bad_plain_looking_row_is_named_as_before(
    tmp_path: Path, row: dict[str, Any], message: str
) -> None:
    """A row that looks plain but is not valid goes to QueryRow, whose error names the file, the
    line and the field, as load_dataset's does."""
    from evalpipe.datasets import load_dataset, load_rows

    path = _jsonl_of(tmp_path, [{"query": "fine"}, row])
    with pytest.raises(DatasetError) as expected:
        load_dataset(path)
    with pytest.raises(DatasetError) as raised:
        load_rows(path)
    assert str(raised.value) == str(expected.value)
    assert f"rows.jsonl:2: {message}" in str(raised.value)


def test_duplicate_ids_across_plain_and_other_rows_are_named(tmp_path: Path) -> None:
    """Two rows sharing an id are refused on the second, whichever kind each is."""
    from evalpipe.datasets import load_rows

    path = _jsonl_of(
        tmp_path, [{"query": "a", "agents": {"w": {}}, "id": "x"}, {"query": "b", "id": "x"}]
    )
    with pytest.raises(DatasetError, match=r"rows\.jsonl:2: id 'x' already used on line 1"):
        load_rows(path)
    path = _jsonl_of(tmp_path, [{"query": "a", "id": "line-2"}, {"query": "b"}])
    with pytest.raises(DatasetError, match=r"rows\.jsonl:2: id 'line-2' already used on line 1"):
        load_rows(path)


def test_plain_row_hashes_are_row_hash_for_random_rows(tmp_path: Path) -> None:
    """The plain rows' hashes, written out field by field, are row_hash of their QueryRows for
    random rows: every optional field present or not, strings with quotes, escapes, control and
    non-ASCII characters, tags, calls with nested, null and missing arguments."""
    import random

    from evalpipe.datasets import PlainRow, load_dataset, load_rows, row_hash

    rng = random.Random(20)
    alphabet = ["a", "Z", " ", '"', "\\", "\n", "\t", "\x01", "\x7f", "é", "☃", "\u2028", "𝄞", "/"]

    def text(empty: bool = True) -> str:
        return "".join(rng.choice(alphabet) for _ in range(rng.randint(0 if empty else 1, 6)))

    def value(depth: int = 0) -> Any:
        kind = rng.randrange(7 if depth < 2 else 5)
        return [
            None,
            rng.randint(-(2**70), 2**70),
            rng.random() * 10 ** rng.randint(-5, 300),
            text(),
            rng.choice([True, False]),
            [value(depth + 1) for _ in range(rng.randint(0, 3))] if kind == 5 else None,
            {text(): value(depth + 1) for _ in range(rng.randint(0, 3))} if kind == 6 else None,
        ][kind]

    data: list[dict[str, Any]] = []
    for i in range(300):
        row: dict[str, Any] = {"query": text(empty=False)}
        if rng.random() < 0.5:
            row["id"] = f"{text()}{i}"
        for name in ("expected_output", "context"):
            if rng.random() < 0.5:
                row[name] = rng.choice([None, text()])
        if rng.random() < 0.5:
            row["tags"] = [text() for _ in range(rng.randint(0, 3))]
        if rng.random() < 0.7:
            row["expected_tool_calls"] = [
                {
                    "name": text(),
                    **(
                        {"arguments": rng.choice([None, {text(): value()}])}
                        if rng.random() < 0.8
                        else {}
                    ),
                }
                for _ in range(rng.randint(0, 2))
            ]
        data.append(row)
    path = _jsonl_of(tmp_path, data)
    plain, models = load_rows(path), load_dataset(path)
    assert all(isinstance(r, PlainRow) for r in plain)
    assert [row_hash(r) for r in plain] == [row_hash(m) for m in models]
    for ours, theirs in zip(plain, models, strict=True):
        _same_row(ours, theirs)
