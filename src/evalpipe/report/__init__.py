"""Run reports and run comparison: one self-contained HTML file per run, statistics over
repetitions with confidence intervals, judge-vs-check disagreement, and ``compare_runs`` for
verdict flips and paired tests between two runs. See docs/report.md.

scipy loads only when a statistic needs it (``report.stats``); the command line imports this
package only inside the commands that report or compare.
"""

from evalpipe.report.compare import (
    PAIRING_KEY,
    Comparison,
    Flip,
    MetricComparison,
    compare_runs,
    render_compare_html,
    render_markdown,
    render_terminal,
    write_compare_html,
)
from evalpipe.report.data import (
    Disagreement,
    RunReport,
    classify_metric,
    load_report_data,
)
from evalpipe.report.html import render_report, write_report
from evalpipe.report.stats import (
    Interval,
    PairedTest,
    RepetitionStats,
    at_least_k,
    bootstrap_mean_interval,
    mcnemar_test,
    pass_at_k,
    pass_hat_k,
    repetition_stats,
    sample_std,
    wilcoxon_test,
    wilson_interval,
)

__all__ = [
    "PAIRING_KEY",
    "Comparison",
    "Disagreement",
    "Flip",
    "Interval",
    "MetricComparison",
    "PairedTest",
    "RepetitionStats",
    "RunReport",
    "at_least_k",
    "bootstrap_mean_interval",
    "classify_metric",
    "compare_runs",
    "load_report_data",
    "mcnemar_test",
    "pass_at_k",
    "pass_hat_k",
    "render_compare_html",
    "render_markdown",
    "render_report",
    "render_terminal",
    "repetition_stats",
    "sample_std",
    "wilcoxon_test",
    "wilson_interval",
    "write_compare_html",
    "write_report",
]
