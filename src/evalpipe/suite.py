"""EvalSuite: one evaluation job, as a YAML file and as the Prefect flow's parameters.

A suite names the target, the dataset, how many repetitions, how to split transcripts into items,
the evaluators (short forms, below), the concurrency, the gates and where the run goes::

    name: travel-demo
    target: examples.travel.workflow:workflow     # an agent, a workflow, or a factory of either
                                                  # (none: every dataset row is a recording)
    dataset: queries.jsonl                        # JSONL, CSV or Parquet; paths are relative to this file
    repetitions: 3
    evaluators:
      - tool_calls_present                        # a built-in check
      - keyword_check: [sunny]                    # a built-in check factory with arguments
      - examples.travel.checks:concise            # an import path of a check or an Evaluator
      - judge: {base_url: http://127.0.0.1:11434/v1, model: llama3.1, metrics: [relevance]}
      - foundry: {model: gpt-4o-mini, evaluators: [relevance]}
    gates: ["no_errors()", "mean(concise) >= 0.5"]

Everything is validated before the first target call: a bad field names its place in the file (with
its line) and says what to write instead.
"""

from __future__ import annotations

import difflib
import hashlib
import inspect
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from evalpipe._internal.calls import DEFAULT_CALL_TIMEOUT
from evalpipe._internal.files import read_utf8
from evalpipe._internal.imports import import_root, load_object
from evalpipe.evaluators import registry
from evalpipe.evaluators.base import AgentScoped, Evaluator
from evalpipe.evaluators.local import LocalEvaluator, check_name_of
from evalpipe.items import ConversationSplit
from evalpipe.llm import ChatEndpoint
from evalpipe.secrets import mask, protect
from evalpipe.spend import Budget, Price
from evalpipe.targets.openai_chat import OpenAIChatAgent
from evalpipe.targets.workflow import target_from_factory

__all__ = [
    "PATH_FIELDS",
    "EvalSuite",
    "SuiteError",
    "apply_concurrency",
    "apply_params",
    "build_evaluators",
    "build_split",
    "build_target",
    "load_suite",
    "shared_evaluators",
]


class SuiteError(ValueError):
    """A suite that cannot run as written; the message names the file, line or field and the fix."""


_RUNNER_OPTIONS = {
    "dask": "address, n_workers, threads_per_worker, processes",
    "ray": "address, init_kwargs",
}
"""The options of ``task_runner: {dask: ...}`` and ``{ray: ...}``."""


class EvalSuite(BaseModel):
    """One evaluation job: what to run, on which data, scored how, and what counts as passing."""

    # Its target and evaluators hold credentials: an invalid value is never echoed in an error.
    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    """The suite's name (letters, digits, ``_ . -``): names the run directory and the flow run."""
    description: str = ""
    """What the suite checks, for people."""
    target: str | dict[str, Any] | None = None
    """``module:attr`` of an agent, a workflow, a class or a factory; or an adapter spec such as
    ``{openai: {base_url, model, instructions, tools: [module:function]}}``. Optional when every
    dataset row is recorded (a ``conversation`` or ``recorded_agents``): nothing is then called."""
    target_version: str = ""
    """A label for the target's version (a model name, a git revision); part of its identity."""
    dataset: str
    """The query set: a .jsonl, .csv or .parquet path (in a suite file, relative to the file)."""
    repetitions: int = Field(default=1, ge=1, le=1000)
    """How many times each query runs."""
    split: str | None = None
    """How transcripts become items: ``last_turn``, ``full``, or ``module:function`` (a splitter).
    Default: ``last_turn`` for agents; for a workflow's per-agent items, the boundary between what
    the agent received and what it produced."""
    evaluators: list[str | dict[str, Any]] = Field(min_length=1)
    """Evaluators in short form; local checks share one LocalEvaluator (per ``agents:`` scope)."""
    concurrency: int = Field(default=8, ge=1, le=4096)
    """At most this many target calls at once, across all shards of the run. With
    ``adaptive_concurrency`` it is also the ceiling of each judge's (and an ``openai`` target's)
    requests in flight, unless the judge sets its own ``max_concurrency``."""
    adaptive_concurrency: bool = True
    """The requests in flight to each OpenAI-compatible endpoint (a judge's, an ``openai``
    target's) adapt to its 429 answers below ``concurrency``: they start at 20 (or
    ``concurrency`` when lower), are cut to 80% per episode of 429s and rise 5% per clean round
    (docs/judges.md). ``false``: each endpoint's ``max_concurrency`` (default 8), fixed, as before.
    A judge that sets ``max_concurrency`` keeps that number, fixed, unless it sets
    ``adaptive_concurrency`` itself. ``concurrency: {limit: 32, adaptive: false}`` is a short form
    of the two fields (``adaptive_concurrency``, given too, wins)."""
    shard_size: int | None = Field(default=None, ge=1)
    """Target calls per Prefect task (default: sized so a run holds at most ~100 shard tasks)."""
    call_attempts: int = Field(default=3, ge=1, le=20)
    """Attempts per target call for transient errors (timeouts, connection errors, 408/429/5xx)."""
    call_timeout: float | None = Field(default=DEFAULT_CALL_TIMEOUT, gt=0)
    """Seconds one target call (one attempt) may take; past it the call is cancelled and its item
    errored (``TargetTimeout``), and the run goes on. ``null``: unbounded."""
    timeout: float | None = Field(default=None, gt=0)
    """Seconds the whole run may take (calls and evaluation); past it the run stops, keeps what it
    journaled, and exits as "could not complete" (3): run it again to resume. ``null``: unbounded."""
    budget: Budget | None = None
    """The most one run of the suite may spend on the calls it makes: ``{tokens: N}`` (the
    target's and the judges' tokens as their endpoints report them), ``{cost_usd: X}`` (at
    ``prices``), or both. Once it is spent no new call starts, the calls in flight finish and are
    kept, and the run exits as "could not complete" (3); run it again (with a larger budget) to
    resume: only the missing calls are made. ``null``: no budget (the spend is still counted)."""
    prices: dict[str, Price] = Field(default_factory=dict)
    """Dollars per million tokens by model, ``{gpt-4o-mini: {input_per_1m: 0.15, output_per_1m:
    0.6}}``: a judge's ``model``, an ``openai`` target's ``model``, or ``target`` for a target
    whose model evalpipe cannot see. Never guessed: a ``cost_usd`` budget needs a price for every
    model the run calls."""
    upstream_context: Literal["received", "user_only"] = "received"
    """Workflow targets: a downstream agent's item holds what it received, or only the user query."""
    include_overall: bool = True
    """Workflow targets: evaluate the whole workflow's answer."""
    include_per_agent: bool = True
    """Workflow targets: evaluate each agent (sub-results keyed by agent name)."""
    gates: list[str | dict[str, Any]] = Field(default_factory=list)
    """Clauses the run must satisfy, e.g. ``mean(relevance) >= 3.5`` or ``no_errors()``."""
    warn_only: bool = False
    """Report failed gates without failing the run."""
    output_dir: str = "runs"
    """Where run directories are created (``{output_dir}/{name}/{timestamp}-{hash}``): a path (in a
    suite file, relative to the file; left out, ``runs`` in the current directory) or a URI."""
    tags: list[str] = Field(default_factory=list)
    """Labels for the flow run and the manifest."""
    compare_with: str | None = None
    """After the run, compare it with a baseline (a Prefect markdown artifact): ``last`` (the
    newest earlier finished run of this suite in ``output_dir``), ``baseline`` (the run
    ``evalpipe bless`` made this suite's baseline; none blessed: no comparison) or a run
    directory."""
    task_runner: Literal["threads", "processes"] | dict[str, Any] = "threads"
    """The Prefect task runner shards run on: ``threads`` (default: the flow's own event loop),
    ``processes`` (Prefect's ``ProcessPoolTaskRunner``, one worker process per CPU; ``{processes:
    N}``: N of them), ``{dask: {...}}`` (prefect-dask, the ``dask`` extra: ``{dask: {n_workers: 2}}``
    starts a local cluster, ``{dask: {address: "tcp://scheduler:8786"}}`` uses an existing one) or
    ``{ray: {address: ...}}`` (prefect-ray, the ray extra). Whatever the runner, ``concurrency``
    bounds the calls in flight for the whole run."""
    suite_dir: str | None = None
    """The suite file's folder (set by :func:`load_suite`, not written in the file): ``module:attr``
    paths (``target``, evaluators, ``split``, tools) resolve from it first, then from the current
    directory. Not part of the fingerprint (moving a checkout changes no result)."""

    @model_validator(mode="before")
    @classmethod
    def _concurrency_short_form(cls, data: Any) -> Any:
        """``concurrency: {limit: N, adaptive: B}`` is ``concurrency: N`` and
        ``adaptive_concurrency: B`` (an ``adaptive_concurrency`` given as well, as ``--param``
        gives it, wins; a mapping of another form is refused by the field)."""
        if not isinstance(data, dict) or not isinstance(form := data.get("concurrency"), dict):
            return data
        if set(form) - {"limit", "adaptive"}:
            return data
        out = {k: v for k, v in data.items() if k != "concurrency"}
        if "limit" in form:
            out["concurrency"] = form["limit"]
        if "adaptive" in form:
            out.setdefault("adaptive_concurrency", form["adaptive"])
        return out

    @field_validator("concurrency", mode="before")
    @classmethod
    def _check_concurrency(cls, value: Any) -> Any:
        if isinstance(value, dict):
            raise ValueError(
                "write a number (the most target calls in flight) or {limit: 32, adaptive: "
                f"false}}; got the key(s) {sorted(value)}"
            )
        return value

    @field_validator("task_runner")
    @classmethod
    def _check_task_runner(cls, value: str | dict[str, Any]) -> str | dict[str, Any]:
        if isinstance(value, str):
            return value
        if list(value) == ["processes"]:
            workers = value["processes"]
            if type(workers) is not int or workers < 1:
                raise ValueError(
                    f"task_runner.processes: the number of worker processes, an integer >= 1; "
                    f"got {workers!r} (or write task_runner: processes for one per CPU)"
                )
            return value
        if list(value) not in (["dask"], ["ray"]):
            raise ValueError(
                "task_runner: 'threads', 'processes', {processes: N}, {dask: {...}} or "
                f"{{ray: {{...}}}}; got {sorted(value)}"
            )
        ((kind, options),) = value.items()
        known = _RUNNER_OPTIONS[kind]
        if not isinstance(options or {}, dict):
            raise ValueError(f"task_runner.{kind}: options as a mapping ({known}), got {options!r}")
        if unknown := sorted(set(options or {}) - set(known.split(", "))):
            raise ValueError(f"task_runner.{kind}: unknown option(s) {unknown}; use {known}")
        return {kind: options or {}}

    @field_validator("split")
    @classmethod
    def _check_split(cls, value: str | None) -> str | None:
        if value is None or value in ("last_turn", "full") or ":" in value:
            return value
        raise ValueError(
            f"unknown split {value!r}; use 'last_turn', 'full' or an import path "
            "'package.module:splitter'"
        )

    def fingerprint(self) -> str:
        """A hash of everything that decides the run's results (not where it is written)."""
        data = self.model_dump(
            mode="json",
            exclude={
                "output_dir",
                "description",
                "tags",
                "task_runner",
                "compare_with",
                "suite_dir",
                "adaptive_concurrency",
                "budget",
                "prices",
            },
        )
        canonical = json.dumps(data, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:12]

    @field_validator("target", "evaluators")
    @classmethod
    def _protect(cls, value: Any) -> Any:
        # Credentials become SecretStr here, the moment the suite is parsed (evalpipe.secrets).
        return protect(value)

    def target_identity(self) -> str:
        """The target's identity for the journal: its spec without its secrets, and its version
        label (rotating a key keeps the identity; changing the model does not)."""
        spec = json.dumps(mask(self.target), sort_keys=True, separators=(",", ":"))
        return f"{spec}@{self.target_version}"


def _param_value(param: str, raw: str) -> Any:
    """A ``--param`` value parsed as YAML; invalid YAML is the parameter's fault, not the suite's."""
    try:
        return yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise SuiteError(
            f"--param {param!r}: the value is not valid YAML ({problem}); fix it (e.g. "
            "gates='[no_errors()]'), or quote it to pass it as text (key='\"text\"')"
        ) from None


def apply_params(data: dict[str, Any], params: Sequence[str]) -> dict[str, Any]:
    """Apply ``key=value`` overrides (dotted keys reach into mappings; values parse as YAML).

    Raises:
        SuiteError: for an override without ``=``, or a value that is not valid YAML (naming the
            ``--param``).
    """
    out: dict[str, Any] = json.loads(json.dumps(data))
    for param in params:
        key, sep, raw = param.partition("=")
        if not sep or not key.strip():
            raise SuiteError(f"--param {param!r}: write it as key=value, e.g. repetitions=5")
        parts = key.strip().split(".")
        node = out
        for part in parts[:-1]:
            if not isinstance(node.get(part), dict):
                node[part] = {}
            node = node[part]
        node[parts[-1]] = _param_value(param, raw)
    return out


def _overriding(params: Sequence[str], loc: Sequence[int | str]) -> str | None:
    """The last ``--param`` that set the field at ``loc`` (or a mapping holding it, or a field
    inside it), or None: an invalid value it gave is its fault, not the suite file's."""
    path = [str(p) for p in loc]
    for param in reversed(params):
        parts = param.partition("=")[0].strip().split(".")
        if path[: len(parts)] == parts or parts[: len(path)] == path:
            return param
    return None


def _yaml_line(root: yaml.Node | None, loc: Sequence[int | str]) -> int | None:
    """The 1-based line of the node at ``loc`` (as deep as it exists) in a composed YAML tree."""
    node = root
    line = node.start_mark.line + 1 if node is not None else None
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            match = next((v for k, v in node.value if k.value == str(part)), None)
            if match is None:
                key = next((k for k, _ in node.value if k.value == str(part)), None)
                return key.start_mark.line + 1 if key is not None else line
            node = match
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
            if part >= len(node.value):
                return line
            node = node.value[part]
        else:
            return line
        line = node.start_mark.line + 1
    return line


def _describe(
    exc: ValidationError, source: str, root: yaml.Node | None, params: Sequence[str] = ()
) -> str:
    lines = []
    for err in exc.errors():
        loc = [p for p in err["loc"] if not (isinstance(p, str) and p in ("str", "dict[str,any]"))]
        field = ".".join(str(p) for p in loc) or "suite"
        line = _yaml_line(root, loc)
        where = f"{source}:{line}" if line is not None else source
        param = _overriding(params, loc) if loc else None
        if param is not None:
            where = f"--param {param!r}"
        if err["type"] == "extra_forbidden":
            close = difflib.get_close_matches(str(loc[-1]), EvalSuite.model_fields, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            lines.append(
                f"{where}: unknown field {field!r}{hint}; known fields: "
                f"{', '.join(EvalSuite.model_fields)}"
            )
        elif err["type"] == "missing":
            lines.append(f"{where}: missing required field {field!r}")
        else:
            lines.append(f"{where}: {field}: {err['msg']}")
    return "\n".join(dict.fromkeys(lines))


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing a mapping that names a key twice (YAML keeps the last one
    silently: a second ``evaluators:`` would drop the first)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"duplicate key {key!r} (first on line {seen[key] + 1}); each key may "
                    "appear once",
                    key_node.start_mark,
                )
            seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep=deep)


def load_suite(path: str | Path, params: Sequence[str] = ()) -> EvalSuite:
    """Read a suite YAML file, apply ``--param`` overrides and validate it.

    Relative paths written in the file (``dataset``, ``output_dir``, ``compare_with``) are
    resolved against the suite file's directory; overrides in ``params`` against the current
    directory (:data:`PATH_FIELDS`).

    Raises:
        SuiteError: for a missing file, invalid YAML, or an invalid field (named with its line).
    """
    file = Path(path)
    if file.is_dir():
        found = sorted(p.name for p in file.glob("*.y*ml"))[:5]
        raise SuiteError(
            f"{file}: is a directory, not a suite file; name the suite's YAML file"
            + (f" (this directory holds {', '.join(found)})" if found else "")
        )
    if not file.is_file():
        raise SuiteError(f"{file}: no such suite file; check the path (relative to {Path.cwd()})")
    try:
        text = read_utf8(file)
    except ValueError as exc:
        raise SuiteError(str(exc)) from None
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)
        root = yaml.compose(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{file}:{mark.line + 1}" if mark is not None else str(file)
        raise SuiteError(f"{where}: invalid YAML ({getattr(exc, 'problem', exc)})") from None
    if not isinstance(data, dict):
        raise SuiteError(
            f"{file}: a suite is a YAML mapping with at least name, dataset, evaluators (and a "
            "target unless the dataset is recorded)"
        )
    data = _beside(data, file.parent)
    data["suite_dir"] = str(file.parent.resolve())
    data = apply_params(data, params)
    try:
        return EvalSuite.model_validate(data)
    except ValidationError as exc:
        raise SuiteError(_describe(exc, str(file), root, params)) from None


PATH_FIELDS = ("dataset", "output_dir", "compare_with")
"""Suite fields that are paths. Written in a suite file, a relative one is relative to the suite
file's directory; given on the command line (``--param``, ``--output``) or as a flow parameter,
to the current directory. ``output_dir`` left out of the file is ``runs`` in the current
directory."""


def _beside(data: dict[str, Any], directory: Path) -> dict[str, Any]:
    """The file's relative paths (:data:`PATH_FIELDS`) made absolute against ``directory``."""
    out = dict(data)
    for key in PATH_FIELDS:
        value = out.get(key)
        if not isinstance(value, str) or not value or "://" in value:
            continue
        if key == "compare_with" and value in ("last", "baseline"):
            continue
        if not Path(value).is_absolute():
            out[key] = str((directory / value).resolve())
    return out


# ---------------------------------------------------------------------------------------------
# Evaluators from short forms (names resolve through evalpipe.evaluators.registry)


def _name_and_settings(spec: Any) -> tuple[str, Any] | None:
    """``name`` or ``{name: settings}`` as (name, settings); None for any other spec."""
    if isinstance(spec, str):
        return spec, None
    if isinstance(spec, dict) and len(spec) == 1:
        ((name, value),) = spec.items()
        return str(name), value
    return None


def _one(spec: Any, where: str) -> Any:
    """A check (callable) or an Evaluator from one short form."""
    found = _name_and_settings(spec)
    if found is None and isinstance(spec, dict):
        raise SuiteError(
            f"{where}: an evaluator mapping has exactly one key (its name), got "
            f"{sorted(spec)}; write each evaluator as its own list entry"
        )
    if found is None:
        raise SuiteError(f"{where}: expected a name or a one-key mapping, got {spec!r}")
    try:
        return registry.build(*found, where=where)
    except registry.RegistryError as exc:
        raise SuiteError(str(exc)) from None


def _split_scope(spec: Any, where: str) -> tuple[Any, tuple[str, ...] | None]:
    """An entry's evaluator spec and its ``agents:`` scope (None: every agent)."""
    if not (isinstance(spec, dict) and "agents" in spec):
        return spec, None
    agents = spec["agents"]
    rest = {k: v for k, v in spec.items() if k != "agents"}
    if not isinstance(agents, list) or not agents or not all(isinstance(a, str) for a in agents):
        raise SuiteError(
            f"{where}.agents: a list of agent names (or 'overall'), e.g. agents: [researcher]"
        )
    if len(rest) != 1:
        raise SuiteError(
            f"{where}: beside 'agents', an entry names exactly one evaluator, got {sorted(rest)}"
        )
    return rest, tuple(dict.fromkeys(agents))


def _scoped(provider: Evaluator, scope: tuple[str, ...] | None) -> Evaluator:
    return provider if scope is None else AgentScoped(provider, scope)


def build_evaluators(suite: EvalSuite) -> list[Evaluator]:
    """The suite's providers, in order; local checks join one LocalEvaluator per ``agents:`` scope,
    placed where its first check is (results are keyed by provider name).

    An entry may carry ``agents: [name, ...]`` (workflow targets): the evaluator then scores only
    those agents' items (``overall``: the whole workflow's answer); it becomes its own provider,
    named with the scope, e.g. ``"Local (researcher)"``.

    Raises:
        SuiteError: naming ``evaluators[i]`` for an unknown name, a bad import path or bad settings;
            or for two providers with the same name.
    """
    order: list[Evaluator | tuple[str, ...] | None] = []
    checks: dict[tuple[str, ...] | None, list[Any]] = {}
    placed: dict[tuple[tuple[str, ...] | None, str], int] = {}
    for i, entry in enumerate(suite.evaluators):
        where = f"evaluators[{i}]"
        spec, scope = _split_scope(entry, where)
        with import_root(suite.suite_dir):
            obj = _one(spec, where)
        if isinstance(obj, Evaluator):
            order.append(_scoped(obj, scope))
            continue
        # the same check twice in one scope would score every item twice (n doubled)
        name = check_name_of(obj)
        if (scope, name) in placed:
            raise SuiteError(
                f"{where}: check {name!r} is already evaluators[{placed[(scope, name)]}]"
                + (f" for agents {list(scope)}" if scope else "")
                + "; list each check once (give a second one its own name with "
                "@evaluator(name=...) if you mean a different check)"
            )
        placed[(scope, name)] = i
        if scope not in checks:
            checks[scope] = []
            order.append(scope)
        checks[scope].append(obj)
    built = [
        slot if isinstance(slot, Evaluator) else _scoped(LocalEvaluator(*checks[slot]), slot)
        for slot in order
    ]
    shared = {id(o) for o in shared_evaluators(suite)}
    for provider in built:
        inner = provider.inner if isinstance(provider, AgentScoped) else provider
        if id(inner) not in shared:  # an imported instance is the user's: left as it is
            apply_concurrency(suite, inner)
    names = [p.name for p in built]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise SuiteError(
            f"evaluators: two providers are both named {dupes[0]!r}; results are keyed by provider "
            "name, so give each its own (e.g. judge: {name: ...})"
        )
    return built


def shared_evaluators(suite: EvalSuite) -> list[Any]:
    """The suite's evaluators that are imported instances (``package.module:obj``), not built for
    the run: a run leaves them open (:func:`evalpipe.evaluators.base.close_providers`)."""
    shared = []
    for i, entry in enumerate(suite.evaluators):
        found = _name_and_settings(_split_scope(entry, f"evaluators[{i}]")[0])
        with import_root(suite.suite_dir):  # as the run built it: a module beside the suite file
            obj = registry.shared_object(*found) if found is not None else None
        if obj is not None:
            shared.append(obj)
    return shared


def apply_concurrency(suite: EvalSuite, obj: Any) -> None:
    """Give an object that calls an OpenAI-compatible endpoint (a judge, an ``openai`` target: an
    ``endpoint`` attribute) the suite's bound on its requests in flight.

    What the object's own spec set wins: ``adaptive_concurrency`` as set (its ceiling its own
    ``max_concurrency``, else the suite's ``concurrency``); a ``max_concurrency`` without it is a
    fixed number for that provider. Otherwise the suite decides: adaptive below ``concurrency``,
    or (``adaptive_concurrency: false``) the endpoint's ``max_concurrency``, fixed.
    """
    endpoint = getattr(obj, "endpoint", None)
    if not isinstance(endpoint, ChatEndpoint):
        return
    chosen = endpoint.model_fields_set
    if "adaptive_concurrency" in chosen:
        adaptive = endpoint.adaptive_concurrency
    elif "max_concurrency" in chosen:
        adaptive = False
    else:
        adaptive = suite.adaptive_concurrency
    update: dict[str, Any] = {"adaptive_concurrency": adaptive}
    if adaptive and "max_concurrency" not in chosen:
        update["max_concurrency"] = suite.concurrency
    obj.endpoint = endpoint.model_copy(update=update)


def build_split(suite: EvalSuite) -> Any:
    """The splitter the suite names (None: each item's default, see ``EvalSuite.split``)."""
    if suite.split is None:
        return None
    if suite.split == "last_turn":
        return ConversationSplit.LAST_TURN
    if suite.split == "full":
        return ConversationSplit.FULL
    try:
        with import_root(suite.suite_dir):
            splitter = load_object(suite.split, what="split")
    except ValueError as exc:
        raise SuiteError(f"split: {exc}") from None
    if not callable(splitter):
        raise SuiteError(f"split: {suite.split!r} is not callable; a splitter takes a conversation")
    return splitter


def _instantiate(obj: Any, where: str) -> Any:
    if hasattr(obj, "run") and not isinstance(obj, type):
        return obj
    if callable(obj):
        try:
            made = obj()
        except TypeError as exc:
            raise SuiteError(
                f"{where}: {exc}; a target factory or class must be callable without arguments"
            ) from None
        except Exception as exc:
            raise SuiteError(
                f"{where}: building the target raised {type(exc).__name__}: {exc}; fix the "
                "factory (it runs once, before the first call)"
            ) from None
        if hasattr(made, "run"):
            # Called once per run; a factory of MAF workflows is called again for every call.
            return target_from_factory(obj, made)
        raise SuiteError(
            f"{where}: calling it returned a {type(made).__name__} with no run(); return an "
            "agent or a workflow"
        )
    raise SuiteError(f"{where}: a {type(obj).__name__} is neither an agent nor a workflow")


def _openai_fields() -> list[str]:
    """What ``target: {openai: {...}}`` takes: OpenAIChatAgent's arguments and the endpoint's
    fields (its ``**endpoint_options``)."""
    arguments = [
        name
        for name, p in inspect.signature(OpenAIChatAgent).parameters.items()
        if p.kind is not inspect.Parameter.VAR_KEYWORD and name not in ("endpoint", "credential")
    ]
    return list(dict.fromkeys([*arguments, *ChatEndpoint.model_fields]))


def build_target(suite: EvalSuite) -> Any:
    """The target object: an agent or a workflow.

    Raises:
        SuiteError: for a path that does not import, or an object that cannot run.
    """
    spec = suite.target
    if spec is None:
        raise SuiteError(
            "target: the suite has no target; add one (an import path or {openai: {...}}), or "
            "give every dataset row a recorded 'conversation'"
        )
    if isinstance(spec, str):
        try:
            with import_root(suite.suite_dir):
                obj = load_object(spec, what="target")
        except ValueError as exc:
            raise SuiteError(f"target: {exc}") from None
        return _instantiate(obj, f"target {spec!r}")
    if len(spec) != 1:
        raise SuiteError(
            f"target: an adapter spec has exactly one key, e.g. {{openai: {{...}}}}; got {sorted(spec)}"
        )
    ((kind, config),) = spec.items()
    if kind == "openai":
        if not isinstance(config, dict):
            raise SuiteError("target.openai: a mapping of settings (base_url, model, ...)")
        config = dict(config)
        known = _openai_fields()
        for key in config:
            if key not in known:
                close = difflib.get_close_matches(str(key), known, n=1)
                raise SuiteError(
                    f"target.openai: unknown field {str(key)!r}"
                    + (f", did you mean {close[0]!r}?" if close else "")
                    + f" (known fields: {', '.join(known)})"
                )
        tools = []
        for j, path in enumerate(config.pop("tools", []) or []):
            try:
                with import_root(suite.suite_dir):
                    tools.append(load_object(path, what="tool"))
            except ValueError as exc:
                raise SuiteError(f"target.openai.tools[{j}]: {exc}") from None
        try:
            agent = OpenAIChatAgent(**config, tools=tools)
        except ValidationError as exc:  # the endpoint's fields (their values are never shown)
            raise SuiteError(
                "; ".join(
                    f"target.openai.{'.'.join(str(p) for p in e['loc'])}: "
                    + e["msg"].removeprefix("Value error, ")
                    for e in exc.errors()
                )
            ) from None
        except (TypeError, ValueError) as exc:
            raise SuiteError(f"target.openai: {exc}") from None
        apply_concurrency(suite, agent)
        return agent
    raise SuiteError(f"target: unknown adapter {kind!r}; use an import path or {{openai: {{...}}}}")
