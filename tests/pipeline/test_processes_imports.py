"""What a worker process of ``task_runner: processes`` imports: never pyarrow, numpy or pandas
(~100 MiB per worker), whose rows the flow's process converts to Arrow instead.

One child process does what a worker does (``worker_main`` without its pipe): it imports the
worker's module, warms up, builds its state from the pool's setup, runs one shard of a small
local-checks suite and pickles its answers (one chunk); then it reports its modules.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

from evalpipe.pipeline.processes import ProcessPool, ShardDone
from evalpipe.runner.prepare import prepare_suite
from evalpipe.suite import load_suite

AGENT = textwrap.dedent(
    """
    from evalpipe import AgentResponse, FunctionCallContent, FunctionResultContent, Message


    class Agent:
        name = "agent"

        async def run(self, messages, **kwargs):
            return AgentResponse(messages=[
                Message("assistant", [FunctionCallContent(
                    name="get_weather", arguments={"city": "Paris"}, call_id="c1")]),
                Message("tool", [FunctionResultContent(call_id="c1", result={"temp_c": 22})]),
                Message("assistant", ["It is sunny in Paris."]),
            ])


    agent = Agent()
    """
)

WORKER = textwrap.dedent(
    """
    import json, pickle, sys
    from evalpipe.pipeline import processes
    processes._warm()
    setup, job = pickle.loads(open(sys.argv[1], "rb").read())
    processes._sync_path(setup.path)
    worker = processes._Worker(setup)
    job.share = 2
    answers = []
    worker.run(job, answers.append)
    data = processes.ForkingPickler.dumps(answers)
    worker.close()
    open(sys.argv[2], "wb").write(data)
    heavy = ("pyarrow", "numpy", "pandas", "prefect", "evalpipe.artifacts.writer")
    print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in heavy or m in heavy)))
    """
)


def test_a_worker_never_imports_pyarrow_numpy_or_pandas(tmp_path: Path) -> None:
    """After its setup and a shard of local checks, encoded and pickled, a worker process has
    imported none of pyarrow, numpy, pandas, prefect or the Parquet writer; its answer holds the
    shard's rows as plain Python columns."""
    (tmp_path / "agent_mod.py").write_text(AGENT, encoding="utf-8")
    rows = [
        {
            "id": f"q{i}",
            "query": f"What's the weather in Paris? ({i})",
            "expected_output": "sunny",
            "expected_tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}],
        }
        for i in range(6)
    ]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), "utf-8")
    suite = {
        "name": "imports",
        "target": "agent_mod:agent",
        "dataset": "rows.jsonl",
        "concurrency": 2,
        "evaluators": [{"keyword_check": ["sunny"]}, "tool_calls_present"],
        "output_dir": str(tmp_path / "runs"),
        "task_runner": {"processes": 1},
    }
    (tmp_path / "suite.json").write_text(json.dumps(suite), encoding="utf-8")
    cwd = os.getcwd()
    os.chdir(tmp_path)
    sys.path.insert(0, str(tmp_path))
    try:
        plan = prepare_suite(load_suite(tmp_path / "suite.json"), tmp_path / "runs" / "run")
        pool = ProcessPool(plan, 1, listed=50)
        job = pool.job(0, plan.shards(6)[0], {})
        (tmp_path / "job.pkl").write_bytes(pickle.dumps((pool._setup(), job)))
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
        done = subprocess.run(
            [sys.executable, "-c", WORKER, str(tmp_path / "job.pkl"), str(tmp_path / "done.pkl")],
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
    finally:
        sys.path.remove(str(tmp_path))
        os.chdir(cwd)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []
    answers = pickle.loads((tmp_path / "done.pkl").read_bytes())
    assert len(answers) == 1  # 6 calls: one chunk
    answer = answers[0]
    assert isinstance(answer, ShardDone)
    encoded = answer.encoded
    assert encoded.runs is not None
    assert encoded.items is not None
    assert encoded.runs.columns[0] == [c.key for c in plan.shards(6)[0]]
    assert len(encoded.items.sizes) == 6
    assert [(s.items, len(s.sizes)) for s in encoded.scores] == [(6, 12)]  # 2 checks an item
    scores = encoded.scores[0]
    for columns in (
        encoded.runs.columns,
        encoded.items.columns,
        scores.item_columns,
        scores.columns,
    ):
        assert all(c is None or type(c) is list for c in columns)
