"""A check for the real-model flow test, importable from a suite (``local_model.flow_checks:...``)."""

from evalpipe import evaluator


@evaluator
def even_length(response: str) -> bool:
    """The answer has an even number of characters: a fair coin on the text, so answers that
    differ between repetitions get verdicts that differ too."""
    return len(response) % 2 == 0
