"""The shape of the house: no import cycle, lazy imports only where they say why, and Prefect
imported only by the Prefect layer (evalpipe/pipeline and flows/)."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
ROOT = SRC.parent


def _module(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


MODULES = {_module(p): p for p in (SRC / "evalpipe").rglob("*.py")}


def _ancestors(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _resolve(node: ast.ImportFrom | ast.Import, here: str) -> list[str]:
    """The evalpipe modules an import statement loads."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        base = node.module or ""
        if node.level:
            package = here if MODULES[here].name == "__init__.py" else here.rpartition(".")[0]
            for _ in range(node.level - 1):
                package = package.rpartition(".")[0]
            base = f"{package}.{base}".rstrip(".")
        names = [base] + [f"{base}.{a.name}" for a in node.names]
    return [n for n in names if n in MODULES]


def _top_level_imports(path: Path) -> list[ast.Import | ast.ImportFrom]:
    """Import statements that run when the module is imported (``if TYPE_CHECKING`` excluded)."""
    found: list[ast.Import | ast.ImportFrom] = []

    def walk(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.Import | ast.ImportFrom):
                found.append(node)
            elif isinstance(node, ast.If):
                if "TYPE_CHECKING" not in ast.unparse(node.test):
                    walk(node.body)
                walk(node.orelse)
            elif isinstance(node, ast.Try):
                walk(node.body)
                for handler in node.handlers:
                    walk(handler.body)

    walk(ast.parse(path.read_text(encoding="utf-8")).body)
    return found


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        deps: set[str] = set()
        own = set(_ancestors(name))
        for node in _top_level_imports(path):
            for target in _resolve(node, name):
                if target in own:  # a submodule reaching into its own package: loaded already
                    continue
                deps.add(target)
                deps.update(a for a in _ancestors(target) if a not in own and a in MODULES)
        deps.discard(name)
        graph[name] = deps
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycle() -> None:
    """No module imports, directly or through others, a module that imports it back (package
    facades importing their own submodules excepted)."""
    assert _cycles(_graph()) == []


def test_function_level_imports_say_why() -> None:
    """A function-level evalpipe import marks why it is lazy: an optional extra or a heavy module
    loaded on first use (``# lazy: ...`` / ``# optional: ...``); anything else belongs at the top."""
    unmarked = []
    for name, path in MODULES.items():
        lines = path.read_text(encoding="utf-8").splitlines()
        tree = ast.parse("\n".join(lines))
        for func in ast.walk(tree):
            if not isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(func):
                if not isinstance(node, ast.Import | ast.ImportFrom):
                    continue
                if not _resolve(node, name):
                    continue
                text = lines[node.lineno - 1]
                if "# lazy:" not in text and "# optional:" not in text:
                    unmarked.append(f"{path.relative_to(ROOT)}:{node.lineno}: {text.strip()}")
    assert unmarked == []


def test_prefect_is_imported_only_by_the_prefect_layer() -> None:
    """Only evalpipe/pipeline (and flows/) import prefect or prefect_dask."""
    offenders = []
    for name, path in MODULES.items():
        if name.startswith("evalpipe.pipeline"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                mods = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                mods = [node.module or ""]
            else:
                continue
            if any(m == "prefect" or m.startswith(("prefect.", "prefect_")) for m in mods):
                offenders.append(f"{name}:{node.lineno}")
    assert offenders == []


def test_the_runner_does_not_import_prefect_or_pyarrow() -> None:
    """Importing the runner (what evaluate_agent uses) loads neither Prefect nor pyarrow."""
    import subprocess
    import sys

    code = (
        "import sys; import evalpipe.runner, evalpipe.evaluate; "
        "print(sorted(m for m in ('prefect', 'pyarrow') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_the_command_line_loads_no_query_engine_until_a_query() -> None:
    """Building the CLI (every command registers) loads neither DuckDB nor scipy: `evalpipe run`
    holds what it imports for the whole run (DuckDB: ~28 MiB)."""
    import subprocess
    import sys

    code = (
        "import sys; from evalpipe.cli import build_parser; build_parser(); "
        "print(sorted(m for m in ('duckdb', 'scipy') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_the_cycle_finder_finds_cycles() -> None:
    """The check above can fail: a synthetic graph with a cycle through three modules is found."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []
