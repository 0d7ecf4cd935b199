"""Custom checks for the travel demo, written as MAF users write them."""

from evalpipe import evaluator


@evaluator
def mentions_expected(response: str, expected_output: str) -> dict[str, object]:
    """The answer contains the row's expected output (case-insensitive)."""
    found = expected_output.lower() in response.lower()
    verb = "mentions" if found else "does not mention"
    return {"passed": found, "reason": f"the response {verb} {expected_output!r}"}


@evaluator(name="concise")
def concise(response: str) -> float:
    """1.0 for answers up to 40 words, falling linearly to 0.0 at 120 words."""
    words = len(response.split())
    return max(0.0, min(1.0, (120 - words) / 80))
