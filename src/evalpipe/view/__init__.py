"""``evalpipe view``: a read-only web app over every run under an output directory.

Pages: the runs (newest first, filtered by suite and tag), a run (the report's content, judge cost,
and a sample table filtered, sorted and paged on the server), an item (its transcript and every
metric's reason and diagnostics), a comparison of two runs (``evalpipe compare``'s statistics and
the flipped items, both transcripts side by side), and a suite's trends (inline SVG). See
docs/view.md.

The web stack (Starlette, served by uvicorn: both come with Prefect) is imported on first use, so
the flow can import :mod:`evalpipe.view.urls` to link to the view without loading it.
"""
