"""close_providers: what a run built is closed at its end, what it imported is left open."""

from __future__ import annotations

import logging
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from evalpipe import EvalItem
from evalpipe.evaluators.base import AgentScoped, close_providers
from evalpipe.results import EvalResults
from evalpipe.suite import EvalSuite, build_evaluators, shared_evaluators


class Closable:
    """A provider with an ``aclose`` that records being closed (or fails)."""

    def __init__(self, name: str = "closable", *, fail: bool = False) -> None:
        self.name = name
        self.fail = fail
        self.closed = 0

    async def evaluate(self, items: Sequence[EvalItem], *, eval_name: str) -> EvalResults:
        raise NotImplementedError

    async def aclose(self) -> None:
        self.closed += 1
        if self.fail:
            raise RuntimeError("the connection was already gone")


async def test_close_providers_closes_each_once_and_logs_a_failing_close(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Every provider with aclose is closed (through AgentScoped too); one that raises is logged
    and the others are still closed."""
    failing, plain, inner = Closable("a", fail=True), Closable("b"), Closable("c")
    with caplog.at_level(logging.WARNING, logger="evalpipe"):
        await close_providers([failing, plain, AgentScoped(inner, ["writer"]), object()])
    assert (failing.closed, plain.closed, inner.closed) == (1, 1, 1)
    assert "closing a failed: RuntimeError: the connection was already gone" in caplog.text


async def test_close_providers_leaves_kept_objects_open() -> None:
    """An object in ``keep`` (bare or inside AgentScoped) is not closed."""
    shared, owned = Closable("shared"), Closable("owned")
    await close_providers([AgentScoped(shared, ["writer"]), owned], keep=[shared])
    assert (shared.closed, owned.closed) == (0, 1)


def test_shared_evaluators_are_the_imported_instances_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A suite's `module:instance` evaluator is shared (a run leaves it open); a class it
    instantiates with settings and the built-in providers are the run's own."""
    (tmp_path / "closing_mod.py").write_text(
        textwrap.dedent(
            """
            from tests_closable import Closable
            SHARED = Closable("shared")
            """
        ),
        encoding="utf-8",
    )
    (tmp_path / "tests_closable.py").write_text(
        textwrap.dedent(
            """
            class Closable:
                def __init__(self, name="made"):
                    self.name = name
                async def evaluate(self, items, *, eval_name):
                    raise NotImplementedError
                async def aclose(self):
                    pass
            """
        ),
        encoding="utf-8",
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    suite = EvalSuite.model_validate(
        {
            "name": "closing",
            "dataset": "queries.jsonl",
            "evaluators": [
                "closing_mod:SHARED",
                {"tests_closable:Closable": {"name": "made"}},
                {"keyword_check": ["x"]},
            ],
        }
    )
    built: list[Any] = build_evaluators(suite)
    shared = shared_evaluators(suite)
    assert [p.name for p in shared] == ["shared"]
    assert shared[0] is sys.modules["closing_mod"].SHARED is built[0]
    assert all(p is not shared[0] for p in built[1:])


def test_shared_evaluators_import_from_the_suite_directory(tmp_path: Path) -> None:
    """A `module:instance` evaluator beside the suite file (not on sys.path) is found as shared
    even before the run built it (a fresh worker process): a run leaves it open instead of
    closing the user's instance."""
    (tmp_path / "beside_suite_evals.py").write_text(
        textwrap.dedent(
            """
            class Closable:
                name = "beside"
                async def evaluate(self, items, *, eval_name):
                    raise NotImplementedError
                async def aclose(self):
                    pass
            SHARED = Closable()
            """
        ),
        encoding="utf-8",
    )
    (tmp_path / "queries.jsonl").write_text('{"query": "hi"}\n', encoding="utf-8")
    (tmp_path / "suite.yaml").write_text(
        "name: beside\ntarget: evalpipe.targets.demo:travel_agent\ndataset: queries.jsonl\n"
        "evaluators: ['beside_suite_evals:SHARED']\n",
        encoding="utf-8",
    )
    from evalpipe.suite import load_suite

    assert "beside_suite_evals" not in sys.modules
    suite = load_suite(tmp_path / "suite.yaml")
    shared = shared_evaluators(suite)
    assert [p.name for p in shared] == ["beside"]
    assert shared[0] is sys.modules["beside_suite_evals"].SHARED
