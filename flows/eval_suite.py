"""Deployable entrypoint: ``flows/eval_suite.py:eval_flow`` runs one EvalSuite.

The flow lives in ``evalpipe.pipeline``; this file only re-exports it, so ``prefect deploy`` and
``flow.serve()`` have a stable path that does not change when the library's layout does.
"""

from evalpipe.pipeline import eval_flow

__all__ = ["eval_flow"]

if __name__ == "__main__":  # pragma: no cover - `python flows/eval_suite.py SUITE.yaml`
    import sys

    from evalpipe.cli import main

    sys.exit(main(["run", *sys.argv[1:]]))
