"""MAF's deprecated AgentEvalConverter under ``from evalpipe import AgentEvalConverter``: each
method warns (DeprecationWarning naming the replacements) and gives what MAF's gives."""

from __future__ import annotations

import warnings
from typing import Any

import pytest

import evalpipe
from evalpipe import AgentEvalConverter, EvalItem

af = pytest.importorskip("agent_framework")
pytestmark = pytest.mark.filterwarnings("ignore::Warning")

from fakes.maf_models import results_view, weather_agent  # noqa: E402

CALL = af.Content.from_function_call("c1", "get_weather", arguments='{"city": "Paris"}')
MESSAGES = [
    af.Message(role="user", contents=["What's the weather in Paris?"]),
    af.Message(role="assistant", contents=[CALL]),
    af.Message(role="tool", contents=[af.Content.from_function_result("c1", result='{"t": 18}')]),
    af.Message(
        role="assistant",
        contents=[
            "It is 18C and sunny.",
            af.Content.from_uri("https://x/a.png", media_type="image/png"),
        ],
    ),
    af.Message(role="assistant", contents=[]),
]


def _warned(call: Any) -> tuple[Any, list[warnings.WarningMessage]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        value = call()
    return value, [w for w in caught if issubclass(w.category, DeprecationWarning)]


def test_every_method_warns_naming_the_replacement_at_the_callers_line() -> None:
    """convert_message, convert_messages, extract_tools and to_eval_item each emit one
    DeprecationWarning (as MAF's do) that names EvalItem, evaluate_agent/evaluate_workflow and
    to_foundry_messages, attributed to the calling code."""
    agent = weather_agent()
    for converter in (af.AgentEvalConverter, AgentEvalConverter):
        for call in (
            lambda c=converter: c.convert_message(MESSAGES[0]),
            lambda c=converter: c.convert_messages(MESSAGES),
            lambda c=converter: c.extract_tools(agent),
            lambda c=converter: c.to_eval_item(query="q", response=af.AgentResponse(messages=[])),
        ):
            _, found = _warned(call)
            assert len(found) == 1, (converter, found)
            assert found[0].filename == __file__
            text = str(found[0].message)
            assert "`AgentEvalConverter` is deprecated" in text
            assert "`EvalItem`" in text
            assert "`evaluate_agent()` / `evaluate_workflow()`" in text
            if converter is AgentEvalConverter:
                assert "evalpipe.foundry.to_foundry_messages()" in text


def test_conversions_and_tools_are_mafs() -> None:
    """convert_message(s) give MAF's legacy wire messages for MAF messages (text, tool calls with
    parsed arguments, tool results, images, empty messages); extract_tools gives MAF's dicts."""
    for message in MESSAGES:
        ours, _ = _warned(lambda m=message: AgentEvalConverter.convert_message(m))
        maf, _ = _warned(lambda m=message: af.AgentEvalConverter.convert_message(m))
        assert ours == maf
    ours, _ = _warned(lambda: AgentEvalConverter.convert_messages(MESSAGES))
    maf, _ = _warned(lambda: af.AgentEvalConverter.convert_messages(MESSAGES))
    assert ours == maf
    assert len(maf) == len(MESSAGES)
    agent = weather_agent()
    ours, _ = _warned(lambda: AgentEvalConverter.extract_tools(agent))
    maf, _ = _warned(lambda: af.AgentEvalConverter.extract_tools(agent))
    assert ours == maf
    assert [t["name"] for t in maf] == ["get_weather"]


async def test_to_eval_item_gives_mafs_item() -> None:
    """to_eval_item from a MAF agent's response: the same conversation split, tools (from the agent,
    or from tools=), context, and the same LocalEvaluator results as MAF's item."""
    agent = weather_agent()
    response = await agent.run("What's the weather in Paris?")

    def both(**kwargs: Any) -> tuple[Any, EvalItem]:
        maf, _ = _warned(lambda: af.AgentEvalConverter.to_eval_item(**kwargs))
        ours, _ = _warned(lambda: AgentEvalConverter.to_eval_item(**kwargs))
        return maf, ours

    maf, ours = both(
        query="What's the weather in Paris?", response=response, agent=agent, context="c"
    )
    assert isinstance(ours, EvalItem)
    assert (ours.query, ours.response, ours.context) == (maf.query, maf.response, maf.context)
    assert [m.role for m in ours.conversation] == [m.role for m in maf.conversation]
    assert [t.name for t in ours.tools or []] == [t.name for t in maf.tools] == ["get_weather"]
    views = []
    for module, item in ((af, maf), (evalpipe, ours)):
        result = await module.LocalEvaluator(
            module.keyword_check("sunny"), module.tool_called_check("get_weather")
        ).evaluate([item], eval_name="converted")
        views.append(results_view(result))
    assert views[1] == views[0]

    maf, ours = both(query=[af.Message(role="user", contents=["Hi"])], response=response)
    assert (ours.query, ours.tools, maf.tools) == (maf.query, None, None)
    maf, ours = both(
        query="q", response=response, tools=[af.tool(lambda city: city, name="lookup")]
    )
    assert [t.name for t in ours.tools or []] == [t.name for t in maf.tools] == ["lookup"]
