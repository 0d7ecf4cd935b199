"""What evalpipe hands to user functions (splitters, checks, @evaluator's ``conversation``) answers
MAF's ``Content`` and ``Message`` attribute sets, so functions written for MAF run unchanged."""

from __future__ import annotations

import pickle
from typing import Any

import pytest

import evalpipe
from evalpipe import (
    DataContent,
    FunctionCallContent,
    FunctionResultContent,
    Message,
    TextContent,
    UriContent,
)

af = pytest.importorskip("agent_framework")
pytestmark = pytest.mark.filterwarnings("ignore::Warning")

from fakes.maf_models import ScriptedModel, results_view, retrieve_memory  # noqa: E402

MAF_CONTENTS = {
    "text": af.Content.from_text("It is sunny."),
    "function_call": af.Content.from_function_call(
        "c1", "get_weather", arguments='{"city": "Paris"}'
    ),
    "function_result": af.Content.from_function_result("c1", result="sunny"),
    "data": af.Content.from_data(b"\x89PNG", "image/png"),
    "uri": af.Content.from_uri("https://example.com/a.jpg", media_type="image/jpeg"),
}

# MAF's function_result also holds the result as text contents in ``items``; evalpipe does not.
NOT_MIRRORED = {("function_result", "items")}


def _maf_attributes() -> set[str]:
    """Every attribute a MAF Content instance has, read from the installed agent_framework."""
    names: set[str] = set()
    for content in MAF_CONTENTS.values():
        names |= set(vars(content))
    return names


@pytest.mark.parametrize("kind", sorted(MAF_CONTENTS))
def test_every_content_kind_answers_mafs_attributes_with_mafs_values(kind: str) -> None:
    """A MAF content converted to evalpipe's answers every attribute of MAF's Content with the value
    MAF's has (None where the kind has none), and `parse_arguments()` as MAF's."""
    maf = MAF_CONTENTS[kind]
    [ours] = Message.coerce(af.Message(role="assistant", contents=[maf])).contents
    attributes = _maf_attributes()
    assert len(attributes) > 40  # the whole set, not a handful
    differing = {
        name: (getattr(ours, name), getattr(maf, name))
        for name in sorted(attributes)
        if (kind, name) not in NOT_MIRRORED and getattr(ours, name) != getattr(maf, name)
    }
    assert differing == {}
    assert ours.parse_arguments() == maf.parse_arguments()


def test_evalpipe_built_contents_answer_the_same_attribute_set() -> None:
    """Contents built with evalpipe's own classes answer every MAF attribute too (None where not
    applicable); an attribute MAF's Content does not have is still an AttributeError."""
    contents = [
        TextContent(text="hi"),
        FunctionCallContent(name="f", arguments={"a": 1}, call_id="c"),
        FunctionResultContent(call_id="c", result={"ok": True}),
        DataContent(uri="data:image/png;base64,AA==", media_type="image/png"),
        UriContent(uri="https://example.com/a.png"),
    ]
    for content in contents:
        for name in _maf_attributes():
            getattr(content, name)
        with pytest.raises(AttributeError):
            content.not_a_maf_attribute  # noqa: B018
    text, call, result, data, uri = contents
    assert (text.name, text.call_id, text.uri, text.informational_only) == (None, None, None, False)
    assert (call.text, call.name, call.hosted, call.parse_arguments()) == (
        None,
        "f",
        False,
        {"a": 1},
    )
    assert (result.name, result.result) == (None, {"ok": True})
    assert (data.text, uri.arguments) == (None, None)
    # MAF's parse_arguments on a string that is not a JSON object
    assert FunctionCallContent(name="f", arguments="[1, 2]").parse_arguments() == {"raw": [1, 2]}
    assert FunctionCallContent(name="f", arguments="{oops").parse_arguments() == {"raw": "{oops"}


def test_messages_answer_mafs_message_attributes() -> None:
    """A message converted from MAF answers Message's attributes (role, text, contents,
    author_name, message_id, additional_properties, raw_representation) with MAF's values; the
    extras live in memory only (JSON unchanged, equality by fields), and survive pickling."""
    maf = af.Message(
        role="assistant",
        contents=["Sunny.", "Warm."],
        author_name="weather",
        message_id="msg_1",
        additional_properties={"turn": 3},
    )
    ours = Message.coerce(maf)
    for name in [*vars(maf), "text"]:
        if name == "contents":
            assert [c.text for c in ours.contents] == [c.text for c in maf.contents]
        else:
            assert getattr(ours, name) == getattr(maf, name), name
    plain = Message("assistant", ["Sunny.", "Warm."], author_name="weather")
    assert ours.model_dump_json() == plain.model_dump_json()
    assert ours == plain
    assert pickle.loads(pickle.dumps(ours)).additional_properties == {"turn": 3}
    fresh = Message("user", ["hi"])
    fresh.additional_properties["seen"] = True  # a dict that keeps what MAF code puts in it
    assert (fresh.additional_properties, fresh.message_id) == ({"seen": True}, None)


def _memory_agent() -> Any:
    return af.Agent(
        client=ScriptedModel(answer="You like trains."), name="memory", tools=[retrieve_memory]
    )


def split_at_memory(conversation: list[Any]) -> tuple[list[Any], list[Any]]:
    """The issue's splitter: everything from the first message that calls retrieve_memory on is
    the response (it reads `c.name` on every content, text ones included)."""
    for i, message in enumerate(conversation):
        if any(c.name == "retrieve_memory" for c in message.contents):
            return conversation[:i], conversation[i:]
    return conversation, []


def _used_memory_check(module: Any) -> Any:
    def used_memory(item: Any) -> Any:
        results = [
            c.result
            for m in item.conversation
            for c in m.contents
            if c.type == "function_result" and c.call_id == "c1"
        ]
        names = [c.name for m in item.conversation for c in m.contents if c.name]
        return module.CheckResult(bool(results), f"tools {names}", "used_memory")

    return used_memory


def _conversation_evaluator(module: Any) -> Any:
    @module.evaluator
    def memory_answered(conversation: list[Any]) -> bool:
        last = conversation[-1]
        return (
            last.role == "assistant"
            and last.additional_properties is not None
            and all(c.uri is None and c.arguments is None for c in last.contents)
        )

    return memory_answered


async def test_a_splitter_and_checks_written_for_maf_content_run_unchanged() -> None:
    """A custom splitter, a plain check and an @evaluator reading MAF Content attributes (`name`,
    `call_id`, `result`, `uri`, `arguments`) on every content give MAF's split and results."""
    views = []
    for module in (af, evalpipe):
        [result] = await module.evaluate_agent(
            agent=_memory_agent(),
            queries=["What do I like?"],
            evaluators=[
                module.keyword_check("trains"),
                _used_memory_check(module),
                _conversation_evaluator(module),
            ],
            conversation_split=split_at_memory,
        )
        views.append(results_view(result))
    maf, ours = views
    # the one deliberate difference (docs/maf-compatibility.md): a bool verdict's reason says
    # what the check looked for after MAF's "passed"/"failed"
    memory = ours["items"][0]["scores"][2]
    assert memory[3] == f"{maf['items'][0]['scores'][2][3]}: memory_answered(conversation)"
    ours["items"][0]["scores"][2] = (*memory[:3], maf["items"][0]["scores"][2][3])
    assert ours == maf
    assert maf["items"][0]["status"] == "pass"
    assert maf["items"][0]["input_text"] == "What do I like?"
    assert maf["items"][0]["scores"][1][3] == "tools ['retrieve_memory']"
