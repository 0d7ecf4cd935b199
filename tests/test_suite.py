"""EvalSuite: YAML loading with line-numbered errors, --param overrides, evaluator short forms, targets."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from evalpipe.checks import tool_calls_present
from evalpipe.evaluators.local import LocalEvaluator
from evalpipe.items import ConversationSplit
from evalpipe.runner.prepare import prepare_suite
from evalpipe.suite import (
    EvalSuite,
    SuiteError,
    apply_params,
    build_evaluators,
    build_split,
    build_target,
    load_suite,
)


def _suite_file(tmp_path: Path, body: str) -> Path:
    (tmp_path / "q.jsonl").write_text('{"query": "hi"}\n', encoding="utf-8")
    path = tmp_path / "suite.yaml"
    path.write_text(textwrap.dedent(body), encoding="utf-8")
    return path


BASE = """\
name: demo
target: evalpipe.targets.demo:travel_agent
dataset: q.jsonl
evaluators:
  - tool_calls_present
"""


def test_load_resolves_dataset_relative_to_the_suite_file(tmp_path: Path) -> None:
    """A relative dataset path is taken from the suite file's directory."""
    suite = load_suite(_suite_file(tmp_path, BASE))
    assert Path(suite.dataset) == (tmp_path / "q.jsonl").resolve()
    assert suite.repetitions == 1
    assert suite.concurrency == 8


def test_every_path_in_a_suite_file_is_relative_to_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: output_dir resolved against the current directory while dataset resolved
    against the suite file. Now dataset, output_dir and compare_with written in the file are all
    relative to the file; command-line overrides to the current directory; left out, output_dir is
    runs in the current directory; URIs, last and baseline are kept as written."""
    (tmp_path / "suites").mkdir()
    monkeypatch.chdir(tmp_path)
    text = BASE + "output_dir: ../out\ncompare_with: ../out/s/old\n"
    suite = load_suite(_suite_file(tmp_path / "suites", text))
    assert Path(suite.dataset) == (tmp_path / "suites" / "q.jsonl").resolve()
    assert suite.output_dir == str((tmp_path / "out").resolve())
    assert suite.compare_with == str((tmp_path / "out" / "s" / "old").resolve())
    path = tmp_path / "suites" / "suite.yaml"
    assert load_suite(path, ["output_dir=here"]).output_dir == "here"
    default = _suite_file(tmp_path / "suites", BASE)
    assert load_suite(default).output_dir == "runs"
    uri = _suite_file(tmp_path / "suites", BASE + "output_dir: s3://b/evals\ncompare_with: last\n")
    assert (load_suite(uri).output_dir, load_suite(uri).compare_with) == ("s3://b/evals", "last")


def test_a_missing_dataset_names_where_it_was_looked_for(tmp_path: Path) -> None:
    """The dataset is looked for beside the suite file, and the error says so."""
    from evalpipe.runner.prepare import prepare_suite

    suite = load_suite(_suite_file(tmp_path, BASE.replace("q.jsonl", "nope.jsonl")))
    with pytest.raises(SuiteError) as exc:
        prepare_suite(suite, None)
    message = str(exc.value)
    assert f"{(tmp_path / 'nope.jsonl').resolve()}: no such dataset file" in message
    assert "relative to the suite file" in message


def test_unknown_field_names_line_and_suggests(tmp_path: Path) -> None:
    """A misspelt field is reported with its line and the field it probably meant."""
    path = _suite_file(tmp_path, BASE + "repetitons: 3\n")
    with pytest.raises(
        SuiteError,
        match=r"suite\.yaml:6: unknown field 'repetitons' \(did you mean 'repetitions'\?\)",
    ):
        load_suite(path)


def test_bad_value_names_its_line(tmp_path: Path) -> None:
    """A bad value names the field and the line it is on."""
    path = _suite_file(tmp_path, BASE + "concurrency: 0\n")
    with pytest.raises(SuiteError, match=r"suite\.yaml:6: concurrency: Input should be greater"):
        load_suite(path)


def test_missing_field_and_invalid_yaml(tmp_path: Path) -> None:
    """A missing required field and broken YAML are both named with the file."""
    with pytest.raises(SuiteError, match="missing required field 'dataset'"):
        load_suite(_suite_file(tmp_path, "name: x\ntarget: a:b\nevaluators: [x]\n"))
    with pytest.raises(SuiteError, match=r"suite\.yaml:2: invalid YAML"):
        load_suite(_suite_file(tmp_path, "name: x\n  bad: [\n"))
    with pytest.raises(SuiteError, match="no such suite file"):
        load_suite(tmp_path / "nope.yaml")


def test_params_override_with_yaml_values(tmp_path: Path) -> None:
    """--param key=value parses values as YAML and reaches into mappings with dotted keys."""
    suite = load_suite(_suite_file(tmp_path, BASE), ["repetitions=5", "tags=[nightly, smoke]"])
    assert suite.repetitions == 5
    assert suite.tags == ["nightly", "smoke"]
    assert apply_params({"a": {"b": 1}}, ["a.c=x"]) == {"a": {"b": 1, "c": "x"}}
    with pytest.raises(SuiteError, match="write it as key=value"):
        apply_params({}, ["repetitions"])


def test_a_param_with_invalid_yaml_is_blamed_on_the_param_not_the_suite(tmp_path: Path) -> None:
    """Regression (issue 34): `--param 'gates=[no_errors()'` was reported as the suite file's
    invalid gates (suite.yaml:1); invalid YAML in a --param value, and a --param value of the wrong
    type, now name the --param."""
    path = _suite_file(tmp_path, BASE)
    with pytest.raises(SuiteError) as info:
        load_suite(path, ["gates=[no_errors()"])
    message = str(info.value)
    assert message.startswith("--param 'gates=[no_errors()': the value is not valid YAML")
    assert "suite.yaml" not in message
    with pytest.raises(SuiteError) as info:
        load_suite(path, ["repetitions=abc"])
    assert str(info.value).startswith("--param 'repetitions=abc': repetitions:")


def test_a_directory_as_the_suite_or_the_dataset_is_named_a_directory(tmp_path: Path) -> None:
    """Regression (issue 34): a directory given as the suite or the dataset was reported as "no
    such file" (or an unknown format); each is now said to be a directory."""
    (tmp_path / "suites").mkdir()
    (tmp_path / "suites" / "nightly.yaml").write_text(BASE, encoding="utf-8")
    with pytest.raises(
        SuiteError, match=r"suites: is a directory, not a suite file.*nightly\.yaml"
    ):
        load_suite(tmp_path / "suites")
    for name in ("data", "data.jsonl"):
        (tmp_path / name).mkdir()
        path = _suite_file(tmp_path, BASE.replace("q.jsonl", name))
        with pytest.raises(SuiteError, match=f"{name}: is a directory, not a dataset file"):
            prepare_suite(load_suite(path))


def test_a_typo_in_an_openai_target_names_the_field_and_the_fix(tmp_path: Path) -> None:
    """Regression (issue 34): `modle` in target.openai said "needs base_url and model"; it now
    says "unknown field 'modle', did you mean 'model'"."""
    suite = _suite(
        target={"openai": {"base_url": "http://127.0.0.1:9/v1", "modle": "gpt-4o"}},
        evaluators=["tool_calls_present"],
    )
    with pytest.raises(SuiteError, match="unknown field 'modle', did you mean 'model'"):
        build_target(suite)


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"api_kye": "sk-hunt-kye-0123456789"}, "unknown field 'api_kye', did you mean 'api_key'"),
        ({"api_key": ["sk-hunt-kye-0123456789"]}, "target.openai.api_key: Input should be"),
    ],
)
def test_an_invalid_openai_target_never_echoes_its_key(
    fields: dict[str, object], expected: str
) -> None:
    """Regression (issue 34): pydantic's input_value put the key of a misspelt `api_kye` and of a
    list-typed `api_key` on stderr. The error names the field and never its value."""
    suite = _suite(
        target={"openai": {"base_url": "http://127.0.0.1:9/v1", "model": "m", **fields}},
        evaluators=["tool_calls_present"],
    )
    with pytest.raises(SuiteError) as info:
        build_target(suite)
    assert expected in str(info.value)
    assert "sk-hunt-kye" not in str(info.value)


def test_fingerprint_ignores_where_the_run_goes() -> None:
    """The fingerprint changes with what decides results, not with output_dir or tags."""
    a = EvalSuite(name="a", target="m:x", dataset="d.jsonl", evaluators=["tool_calls_present"])
    b = a.model_copy(update={"output_dir": "elsewhere", "tags": ["t"]})
    c = a.model_copy(update={"repetitions": 2})
    assert a.fingerprint() == b.fingerprint() != c.fingerprint()


def _suite(**kw: object) -> EvalSuite:
    data: dict[str, object] = {"name": "s", "target": "m:x", "dataset": "d.jsonl"}
    data.update(kw)
    return EvalSuite.model_validate(data)


def test_short_forms_group_adjacent_checks() -> None:
    """Names, factories with list/dict/scalar arguments and import paths become one LocalEvaluator."""
    suite = _suite(
        evaluators=[
            "tool_calls_present",
            {"keyword_check": ["sunny", "paris"]},
            {"tool_called_check": {"mode": "any"}},
            "examples.travel.checks:concise",
        ]
    )
    (local,) = build_evaluators(suite)
    assert isinstance(local, LocalEvaluator)
    names = [getattr(c, "__name__", getattr(c, "name", None)) for c in local.checks]
    assert names[0] == tool_calls_present.__name__
    assert len(local.checks) == 4


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            "tool_calls_presnt",
            r"evaluators\[0\]: unknown evaluator 'tool_calls_presnt' \(did you mean 'tool_calls_present'\?\)",
        ),
        ({"tool_calls_present": [1]}, r"evaluators\[0\]: 'tool_calls_present' takes no arguments"),
        ({"keyword_check": ["a"], "extra": 1}, r"exactly one key"),
        (
            "nosuch.module:check",
            r"evaluators\[0\]: evaluator 'nosuch.module:check': cannot import module",
        ),
        ({"keyword_check": {"bogus": 1}}, r"evaluators\[0\]: .*bogus.*check the arguments"),
    ],
)
def test_bad_evaluator_specs_are_named(spec: object, message: str) -> None:
    """Each bad evaluator spec is reported with its index and what to write."""
    with pytest.raises(SuiteError, match=message):
        build_evaluators(_suite(evaluators=[spec]))


def test_split_and_target_builders() -> None:
    """Built-in splits map to ConversationSplit; targets import, instantiate factories, or fail clearly."""
    assert build_split(_suite(evaluators=["tool_calls_present"])) is None
    assert build_split(_suite(evaluators=["x"], split="last_turn")) is ConversationSplit.LAST_TURN
    assert build_split(_suite(evaluators=["x"], split="full")) is ConversationSplit.FULL
    with pytest.raises(ValueError, match="unknown split 'turns'"):
        _suite(evaluators=["x"], split="turns")
    agent = build_target(_suite(evaluators=["x"], target="evalpipe.targets.demo:travel_agent"))
    assert hasattr(agent, "run")
    with pytest.raises(SuiteError, match=r"target: target 'nope\.mod:x': cannot import module"):
        build_target(_suite(evaluators=["x"], target="nope.mod:x"))
    with pytest.raises(SuiteError, match="neither an agent nor a workflow"):
        build_target(_suite(evaluators=["x"], target="evalpipe.targets.demo:CITIES"))


def test_evaluator_of_the_wrong_type_is_named_with_its_line(tmp_path: Path) -> None:
    """A number where an evaluator belongs is reported at its line."""
    path = _suite_file(
        tmp_path, BASE.replace("  - tool_calls_present", "  - tool_calls_present\n  - 3")
    )
    with pytest.raises(SuiteError, match=r"suite\.yaml:6: evaluators\.1: Input should be"):
        load_suite(path)


def test_judge_and_foundry_short_forms_build_providers_in_order() -> None:
    """{judge: ...} and {foundry: ...} build their providers between groups of local checks."""
    from evalpipe.evaluators.judge import JudgeEvaluator
    from evalpipe.foundry import FoundryEvals

    suite = _suite(
        evaluators=[
            "tool_calls_present",
            {
                "judge": {
                    "base_url": "http://127.0.0.1:9/v1",
                    "model": "m",
                    "metrics": ["relevance"],
                }
            },
            {"foundry": {"endpoint": "http://127.0.0.1:9/api/projects/p", "model": "judge"}},
            {"keyword_check": ["x"]},
        ]
    )
    providers = build_evaluators(suite)
    assert [type(p) for p in providers] == [LocalEvaluator, JudgeEvaluator, FoundryEvals]
    local = providers[0]
    assert isinstance(local, LocalEvaluator)
    assert len(local.checks) == 2  # both local checks, in one provider


def test_two_providers_with_one_name_are_refused() -> None:
    """Two judges both named "Judge" would collide in the results; the error says to name them."""
    judge = {"base_url": "http://127.0.0.1:9/v1", "model": "m"}
    with pytest.raises(SuiteError, match="both named 'Judge'"):
        build_evaluators(_suite(evaluators=[{"judge": judge}, {"judge": judge}]))
    named = {**judge, "name": "Judge B"}
    assert len(build_evaluators(_suite(evaluators=[{"judge": judge}, {"judge": named}]))) == 2


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            {"judge": {"base_url": "http://x/v1", "model": "m", "metricz": []}},
            r"evaluators\[0\]\.judge: metricz: Extra inputs",
        ),
        (
            {"judge": {"base_url": "http://x/v1", "model": "m", "metrics": ["vibes"]}},
            r"evaluators\[0\]\.judge: metrics\.0",
        ),
        (
            {"foundry": {"model": "j", "evaluators": ["relevanse"]}},
            r"evaluators\[0\]\.foundry: .*relevanse",
        ),
        ({"judge": "http://x"}, r"evaluators\[0\]: judge takes a mapping of settings"),
    ],
)
def test_bad_provider_settings_name_the_field(spec: object, message: str) -> None:
    """A judge or Foundry setting that does not validate is named with its place in the suite."""
    with pytest.raises(SuiteError, match=message):
        build_evaluators(_suite(evaluators=[spec]))


def test_agents_scope_makes_a_provider_per_scope() -> None:
    """`agents:` beside an evaluator scopes it to those workflow agents, as a provider of its own."""
    from evalpipe.suite import AgentScoped

    suite = _suite(
        evaluators=[
            "tool_call_args_match",
            {"task_navigation_efficiency": "in_order_match", "agents": ["researcher"]},
            {"keyword_check": ["x"], "agents": ["researcher"]},
            {"keyword_check": ["y"], "agents": ["writer", "overall"]},
        ]
    )
    providers = build_evaluators(suite)
    assert [p.name for p in providers] == [
        "Local",
        "Local (researcher)",
        "Local (writer, overall)",
    ]
    scoped = providers[1]
    assert isinstance(scoped, AgentScoped)
    assert isinstance(scoped.inner, LocalEvaluator)
    assert len(scoped.inner.checks) == 2


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (
            {"keyword_check": ["x"], "agents": "writer"},
            r"evaluators\[0\]\.agents: a list of agent names",
        ),
        (
            {"keyword_check": ["x"], "tool_calls_present": None, "agents": ["w"]},
            r"exactly one evaluator",
        ),
    ],
)
def test_bad_agents_scope_is_named(entry: object, message: str) -> None:
    """A malformed `agents:` scope is reported with its place and the form to use."""
    with pytest.raises(SuiteError, match=message):
        build_evaluators(_suite(evaluators=[entry]))


def test_agents_scope_is_checked_against_the_target(tmp_path: Path) -> None:
    """A scope on a single-agent target, or naming an agent the workflow lacks, fails before any call."""
    from evalpipe.runner.prepare import prepare_suite

    (tmp_path / "q.jsonl").write_text('{"query": "Plan a trip to Paris"}\n', encoding="utf-8")
    scoped = {"keyword_check": ["x"], "agents": ["reseacher"]}
    agent = _suite(
        target="evalpipe.targets.demo:travel_agent",
        dataset=str(tmp_path / "q.jsonl"),
        evaluators=[scoped],
    )
    with pytest.raises(SuiteError, match="only applies to workflow targets"):
        prepare_suite(agent, tmp_path / "run")
    workflow = agent.model_copy(update={"target": "examples.travel.workflow:workflow"})
    with pytest.raises(
        SuiteError, match="names agent 'reseacher', which the workflow does not have"
    ):
        prepare_suite(workflow, tmp_path / "run")


def test_a_suite_without_a_target_loads_and_build_target_says_why(tmp_path: Path) -> None:
    """`target` is optional (recorded datasets); asking to build a missing target names the fix."""
    body = "name: recorded\ndataset: q.jsonl\nevaluators:\n  - tool_calls_present\n"
    suite = load_suite(_suite_file(tmp_path, body))
    assert suite.target is None
    with pytest.raises(SuiteError, match=r"the suite has no target.*recorded 'conversation'"):
        build_target(suite)
    with_target = load_suite(_suite_file(tmp_path, BASE))
    assert suite.fingerprint() != with_target.fingerprint()


def test_a_targetless_suite_needs_every_row_recorded(tmp_path: Path) -> None:
    """Preparing a run of a suite without a target refuses the first unrecorded row by id."""
    from evalpipe.runner.prepare import prepare_suite

    body = "name: recorded\ndataset: q.jsonl\nevaluators:\n  - tool_calls_present\n"
    suite = load_suite(_suite_file(tmp_path, body))
    with pytest.raises(SuiteError, match=r"dataset row 'line-1' \(row 1\) has no recording"):
        prepare_suite(suite, tmp_path / "run")
    (tmp_path / "q.jsonl").write_text(
        '{"conversation": [{"role": "user", "content": "hi"}, '
        '{"role": "assistant", "content": "hello"}]}\n',
        encoding="utf-8",
    )
    plan = prepare_suite(suite, tmp_path / "run")
    assert plan.kind == "agent"
    assert plan.target is None


def test_a_duplicate_key_is_refused_with_both_lines(tmp_path: Path) -> None:
    """Regression: a key written twice in the suite YAML silently kept the last value."""
    body = BASE + "evaluators:\n  - tool_call_args_match\n"
    with pytest.raises(
        SuiteError,
        match=r"suite.yaml:6: invalid YAML \(duplicate key 'evaluators' \(first on line 4\)",
    ):
        load_suite(_suite_file(tmp_path, body))


def test_an_evaluator_listed_twice_is_refused(tmp_path: Path) -> None:
    """Regression: an evaluator listed twice was scored twice (n=6 scores for 3 items)."""
    body = BASE + "  - tool_calls_present\n"
    suite = load_suite(_suite_file(tmp_path, body))
    with pytest.raises(
        SuiteError, match=r"evaluators\[1\]: check 'tool_calls_present' is already evaluators\[0\]"
    ):
        build_evaluators(suite)
    scoped = BASE + "  - {tool_calls_present: null, agents: [writer]}\n"
    assert len(build_evaluators(load_suite(_suite_file(tmp_path, scoped)))) == 2


def test_a_suite_that_is_not_utf8_names_the_line(tmp_path: Path) -> None:
    """Non-UTF-8 bytes in a suite file: the error names the file, line and column."""
    path = _suite_file(tmp_path, BASE)
    path.write_bytes(BASE.encode() + b"description: caf\xe9\n")
    with pytest.raises(SuiteError, match=r"suite.yaml:6:17: not UTF-8 \(byte 0xe9\)"):
        load_suite(path)


def test_task_runner_processes_forms_load() -> None:
    """``processes`` (one worker per CPU) and ``{processes: N}`` load as given; N stays out of the
    fingerprint, like every task runner."""
    base = {
        "name": "s",
        "target": "a:b",
        "dataset": "d.jsonl",
        "evaluators": ["tool_calls_present"],
    }
    assert EvalSuite.model_validate({**base, "task_runner": "processes"}).task_runner == "processes"
    two = EvalSuite.model_validate({**base, "task_runner": {"processes": 2}})
    assert two.task_runner == {"processes": 2}
    assert two.fingerprint() == EvalSuite.model_validate(base).fingerprint()


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (
            "0",
            r"suite\.yaml:6: task_runner: Value error, task_runner\.processes: the number of "
            r"worker processes, an integer >= 1; got 0",
        ),
        ("-1", r"task_runner\.processes: .* got -1"),
        ("true", r"task_runner\.processes: .* got True"),
        ("2.5", r"task_runner\.processes: .* got 2\.5"),
        ("'2'", r"task_runner\.processes: .* got '2'"),
    ],
)
def test_bad_task_runner_processes_is_named_with_its_line(
    tmp_path: Path, value: str, message: str
) -> None:
    """``{processes: N}`` with N not an integer >= 1 is refused, naming the field and the line."""
    path = _suite_file(tmp_path, BASE + f"task_runner: {{processes: {value}}}\n")
    with pytest.raises(SuiteError, match=message):
        load_suite(path)


def test_unknown_task_runner_names_the_choices(tmp_path: Path) -> None:
    """An unknown task runner name or mapping key is refused with the forms that exist."""
    path = _suite_file(tmp_path, BASE + "task_runner: forks\n")
    with pytest.raises(SuiteError, match=r"task_runner.*'threads' or 'processes'"):
        load_suite(path)
    path = _suite_file(tmp_path, BASE + "task_runner: {pool: 2}\n")
    with pytest.raises(
        SuiteError, match=r"'threads', 'processes', \{processes: N\}, \{dask: \{\.\.\.\}\} or \{ray"
    ):
        load_suite(path)


def test_module_attr_resolves_from_the_suite_folder_first_then_the_current_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A suite's target, evaluator and split import from the suite file's folder, whatever the
    current directory (issue 31); a module of the same name in the current directory loses to
    the suite's, and one only in the current directory still resolves."""
    project, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    project.mkdir()
    elsewhere.mkdir()
    (project / "q.jsonl").write_text('{"query": "hi"}\n', encoding="utf-8")
    (project / "beside_suite_agent.py").write_text(
        "from evalpipe.targets.demo import travel_agent\n"
        "agent = travel_agent()\n"
        "WHERE = 'project'\n",
        encoding="utf-8",
    )
    (elsewhere / "beside_suite_agent.py").write_text(
        "raise ImportError('the current directory was searched first')\n", encoding="utf-8"
    )
    (project / "beside_suite_checks.py").write_text(
        "from evalpipe import evaluator\n"
        "@evaluator\n"
        "def says_hi(response: str) -> bool:\n"
        "    return 'hi' in response\n"
        "def whole(conversation):\n"
        "    return [conversation]\n",
        encoding="utf-8",
    )
    (elsewhere / "only_in_cwd_split.py").write_text(
        "def split(conversation):\n    return [conversation]\n", encoding="utf-8"
    )
    (project / "suite.yaml").write_text(
        textwrap.dedent("""\
            name: beside
            target: beside_suite_agent:agent
            dataset: q.jsonl
            split: only_in_cwd_split:split
            evaluators:
              - beside_suite_checks:says_hi
            """),
        encoding="utf-8",
    )
    monkeypatch.chdir(elsewhere)
    monkeypatch.setattr("sys.path", list(__import__("sys").path))
    suite = load_suite(project / "suite.yaml")
    assert suite.suite_dir == str(project.resolve())
    target = build_target(suite)
    assert type(target).__module__ == "evalpipe.targets.demo"
    assert __import__("sys").modules["beside_suite_agent"].WHERE == "project"
    [provider] = build_evaluators(suite)
    assert isinstance(provider, LocalEvaluator)
    assert callable(build_split(suite))
    moved = suite.model_copy(update={"suite_dir": str(elsewhere)})
    assert moved.fingerprint() == suite.fingerprint()  # where the checkout is changes no result
