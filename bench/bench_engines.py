"""Benchmark (not a test): DuckDB against pyarrow's Acero on the view's and the report's queries
over a 100,000-item run's Parquet files, to choose the one query engine (issue 35).

The same three workloads in both engines, each read from the files (nothing cached between
trials):

1. ``first page``: the view's sample table, page 1 — every overall item's verdict (scores) with
   its query and response (items), sorted by item_index, 50 rows, and the total count;
2. ``comparison``: two runs' scores paired on (agent, item_id, metric): per metric, how many
   pairs, flips pass -> fail and fail -> pass, and the mean score of each side;
3. ``report``: per provider, agent and metric, the counts by status, the score's mean, min, max
   and standard deviation, and the metric's p50 / p90 latency.

Each engine answers in a fresh process per workload (``cold``: the import of the engine and the
first read included, what a first visit costs), then ``--repeat`` times in that process
(``warm``). The answers of the two engines are compared (same rows).

Usage: python bench/bench_engines.py RUN_DIR [OTHER_RUN_DIR] [--repeat 5]
(RUN_DIR: e.g. bench_artifacts.py --out DIR --keep). Writes bench/results/engines.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

DUCKDB = {
    "first page": """
        WITH verdicts AS (
            SELECT agent, item_id, any_value(item_status) AS status, any_value(item_index) AS idx
            FROM read_parquet('{a}/scores.parquet') WHERE agent = 'overall' GROUP BY ALL
        )
        SELECT v.idx, v.item_id, v.status, i.query, i.response, count(*) OVER () AS total
        FROM verdicts v JOIN read_parquet('{a}/items.parquet') i USING (agent, item_id)
        ORDER BY v.idx LIMIT 50
    """,
    "comparison": """
        SELECT a.metric, count(*) AS pairs,
               count(*) FILTER (a.status = 'pass' AND b.status = 'fail') AS pass_to_fail,
               count(*) FILTER (a.status = 'fail' AND b.status = 'pass') AS fail_to_pass,
               avg(a.score) AS mean_a, avg(b.score) AS mean_b
        FROM read_parquet('{a}/scores.parquet') a
        JOIN read_parquet('{b}/scores.parquet') b USING (agent, item_id, metric)
        WHERE a.metric IS NOT NULL
        GROUP BY ALL ORDER BY ALL
    """,
    "report": """
        SELECT provider, agent, metric,
               count(*) FILTER (status = 'pass') AS passed,
               count(*) FILTER (status = 'fail') AS failed,
               count(*) FILTER (status = 'error') AS errored,
               avg(score) AS mean, min(score) AS lo, max(score) AS hi, stddev_samp(score) AS std,
               quantile_cont(latency_s, 0.5) AS p50, quantile_cont(latency_s, 0.9) AS p90
        FROM read_parquet('{a}/scores.parquet') WHERE metric IS NOT NULL
        GROUP BY ALL ORDER BY ALL
    """,
}


def _duckdb(workload: str, a: str, b: str) -> list[tuple[Any, ...]]:
    import duckdb

    con = duckdb.connect(":memory:")
    rows = con.execute(DUCKDB[workload].format(a=a, b=b)).fetchall()
    con.close()
    return [tuple(r) for r in rows]


def _acero(workload: str, a: str, b: str) -> list[tuple[Any, ...]]:
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    if workload == "first page":
        scores = pq.read_table(
            f"{a}/scores.parquet",
            columns=["agent", "item_id", "item_status", "item_index"],
            filters=[("agent", "=", "overall")],
        )
        # "first" is an ordered aggregate (one thread); min is what any_value is here
        verdicts = scores.group_by(["agent", "item_id"]).aggregate(
            [("item_status", "min"), ("item_index", "min")]
        )
        items = pq.read_table(
            f"{a}/items.parquet", columns=["agent", "item_id", "query", "response"]
        )
        joined = verdicts.join(items, ["agent", "item_id"])
        page = joined.sort_by("item_index_min").slice(0, 50)
        total = joined.num_rows
        return [
            (
                r["item_index_min"],
                r["item_id"],
                r["item_status_min"],
                r["query"],
                r["response"],
                total,
            )
            for r in page.to_pylist()
        ]
    if workload == "comparison":
        cols = ["agent", "item_id", "metric", "status", "score"]
        left = pq.read_table(f"{a}/scores.parquet", columns=cols).filter(
            pc.is_valid(pc.field("metric"))
        )
        right = pq.read_table(f"{b}/scores.parquet", columns=cols)
        joined = left.join(
            right, ["agent", "item_id", "metric"], left_suffix="_a", right_suffix="_b"
        )
        p2f = pc.and_(pc.equal(joined["status_a"], "pass"), pc.equal(joined["status_b"], "fail"))
        f2p = pc.and_(pc.equal(joined["status_a"], "fail"), pc.equal(joined["status_b"], "pass"))
        joined = joined.append_column("p2f", p2f).append_column("f2p", f2p)
        grouped = (
            joined.group_by("metric")
            .aggregate(
                [
                    ("metric", "count"),
                    ("p2f", "sum"),
                    ("f2p", "sum"),
                    ("score_a", "mean"),
                    ("score_b", "mean"),
                ]
            )
            .sort_by("metric")
        )
        return [
            (
                r["metric"],
                r["metric_count"],
                r["p2f_sum"],
                r["f2p_sum"],
                r["score_a_mean"],
                r["score_b_mean"],
            )
            for r in grouped.to_pylist()
        ]
    scores = pq.read_table(
        f"{a}/scores.parquet",
        columns=["provider", "agent", "metric", "status", "score", "latency_s"],
    ).filter(pc.is_valid(pc.field("metric")))
    flags = {s: pc.equal(scores["status"], s) for s in ("pass", "fail", "error")}
    for s, flag in flags.items():
        scores = scores.append_column(s, flag)
    grouped = (
        scores.group_by(["provider", "agent", "metric"])
        .aggregate(
            [
                ("pass", "sum"),
                ("fail", "sum"),
                ("error", "sum"),
                ("score", "mean"),
                ("score", "min"),
                ("score", "max"),
                ("score", "stddev", pc.VarianceOptions(ddof=1)),
                ("latency_s", "tdigest", pc.TDigestOptions(q=[0.5, 0.9])),
            ]
        )
        .sort_by([("provider", "ascending"), ("agent", "ascending"), ("metric", "ascending")])
    )
    return [
        (
            r["provider"], r["agent"], r["metric"], r["pass_sum"], r["fail_sum"], r["error_sum"],
            r["score_mean"], r["score_min"], r["score_max"], r["score_stddev"],
            *(r["latency_s_tdigest"] or [None, None]),
        )
        for r in grouped.to_pylist()
    ]  # fmt: skip


ENGINES = {"duckdb": _duckdb, "acero": _acero}


def _child(engine: str, workload: str, a: str, b: str, repeat: int) -> None:
    t0 = time.perf_counter()
    rows = ENGINES[engine](workload, a, b)
    cold = time.perf_counter() - t0
    warm = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        ENGINES[engine](workload, a, b)
        warm.append(time.perf_counter() - t0)
    print(
        json.dumps({"cold_s": cold, "warm_s": statistics.median(warm), "rows": rows}, default=str)
    )


def _rounded(rows: list[list[Any]]) -> list[list[Any]]:
    return [[round(v, 6) if isinstance(v, float) else v for v in row] for row in rows]


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        _child(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], int(sys.argv[6]))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("other", type=Path, nargs="?")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    a = str(args.run.resolve())
    b = str((args.other or args.run).resolve())
    results: dict[str, dict[str, Any]] = {}
    for workload in DUCKDB:
        answers = {}
        for engine in ENGINES:
            done = subprocess.run(
                [sys.executable, __file__, "--child", engine, workload, a, b, str(args.repeat)],
                capture_output=True,
                text=True,
                check=True,
            )
            measured = json.loads(done.stdout)
            answers[engine] = _rounded(measured.pop("rows"))
            results.setdefault(workload, {})[engine] = {k: round(v, 3) for k, v in measured.items()}
        # quantiles differ by method (exact interpolation vs t-digest): compared without them
        strip = 2 if workload == "report" else 0
        same = [r[: len(r) - strip] for r in answers["duckdb"]] == [
            r[: len(r) - strip] for r in answers["acero"]
        ]
        results[workload]["same_answer"] = same  # type: ignore[assignment]
    HERE.joinpath("results").mkdir(exist_ok=True)
    HERE.joinpath("results", "engines.json").write_text(
        json.dumps({"run": a, "other": b, "results": results}, indent=2) + "\n"
    )
    print(f"{'workload':<12} {'engine':<8} {'cold s':>7} {'warm s':>7}")
    for workload, by_engine in results.items():
        for engine in ENGINES:
            r = by_engine[engine]
            print(f"{workload:<12} {engine:<8} {r['cold_s']:>7.3f} {r['warm_s']:>7.3f}")
        print(f"{'':<12} same answer: {by_engine['same_answer']}")


if __name__ == "__main__":
    main()
