"""What a shard sends back from a worker: its rows as one pickled value, unpacked only where the
flow writes them, equal to what the worker encoded."""

from __future__ import annotations

import pickle

import cloudpickle

from evalpipe import evaluate_agent
from evalpipe.artifacts.encoder import RowEncoder
from evalpipe.checks import keyword_check
from evalpipe.pipeline.shards import ShardRows
from evalpipe.spend import Spend
from evalpipe.tally import CallTally, Counts, SummaryTally
from evalpipe.targets.demo import travel_agent


async def test_a_shards_rows_cross_a_process_as_one_value_and_unpack_equal() -> None:
    """Packed as a worker packs them, a shard's encoded rows are one bytes value (a task runner's
    copies of the result are then cheap: no object per row value), ``batch()`` gives back exactly
    the rows encoded, and what the shard spent crosses with them; in the flow's process, unpacked,
    the rows are the object itself."""
    results = await evaluate_agent(
        agent=travel_agent(),
        queries=["Weather in Paris?", "Weather in Oslo?"],
        evaluators=[keyword_check("Paris")],
    )
    encoded = RowEncoder().results(results, SummaryTally().check(results))
    spent = Spend()
    spent.add("target", "agent-model", {"input_tokens": 3, "output_tokens": 4}, None)
    rows = ShardRows(0, encoded, results, CallTally(), Counts(), 2, spent=spent)
    assert rows.batch() is encoded

    rows.pack()
    sent = pickle.loads(cloudpickle.dumps(rows))
    assert isinstance(sent.encoded, bytes)
    assert sent.batch() == encoded
    assert sent.batch() is not sent.batch()  # nothing kept unpacked
    assert [r.total for r in sent.results] == [r.total for r in results]
    assert (sent.index, sent.n_calls) == (0, 2)
    assert sent.spent == spent
