"""Secrets: every credential a suite holds is a secret type from the moment the suite is parsed.

``protect`` wraps every field that can hold a credential in pydantic's ``SecretStr``: a field named
like one (``api_key``, ``token``, ``password``, ``client_secret``, ``connection_string``, ...,
``*_key``, ``*_token``, ``*_secret``, ``*_password``), every value of a ``headers`` mapping, and
any URL with credentials in it (user info, a signed query string). A ``SecretStr`` shows as
``**********`` in its repr, in JSON and so in everything derived from them (manifests, run markers,
Prefect parameters, the target's identity); only the HTTP layer asks for the value
(``get_secret_value``). ``*_env`` fields name a variable and stay as they are.

What a run knows of its secrets (the values, and those of the variables its ``*_env`` fields
name) goes into a :class:`Scrubber`, which replaces them in any text an endpoint or a traceback
echoed back (``Incorrect API key provided: Bearer sk-...``) before it is stored, logged, printed or
emitted.
"""

from __future__ import annotations

import collections
import itertools
import math
import os
import re
import string
from collections.abc import Callable, Iterable, Iterator
from typing import Any
from urllib.parse import quote, urlsplit

from pydantic import SecretStr

__all__ = [
    "MASK",
    "Scrubber",
    "is_secret_key",
    "is_secret_url",
    "looks_secret",
    "mask",
    "protect",
    "reveal",
    "secret_paths",
    "secret_shaped_paths",
    "secret_values",
    "secrets_of",
]

MASK = "***"
"""What a secret is written as where a mask is spelt by evalpipe (pydantic writes ``**********``)."""

_SECRET_KEY = re.compile(
    r"^(api_?key|apikey|key|password|passwd|pwd|secret|client_secret|token|access_token|"
    r"refresh_token|id_token|bearer|auth|authorization|cookie|connection_string|conn_str|"
    r"sas|sas_token|sas_url|account_key|subscription_key|private_key)$"
    r"|_(key|token|secret|password|passwd)$"
)
_SIGNED_QUERY = re.compile(
    r"[?&](sig|signature|x-amz-signature|x-amz-credential|x-goog-signature|x-goog-credential|"
    r"token|access_token|api_key|apikey|key|code|sv|se|skoid)=",
    re.IGNORECASE,
)


def is_secret_key(name: str) -> bool:
    """Whether a field of this name can hold a credential (``*_env`` fields name a variable)."""
    key = name.strip().lower().replace("-", "_")
    if key.endswith("_env"):
        return False
    return bool(_SECRET_KEY.search(key))


def is_secret_url(value: str) -> bool:
    """A URL carrying credentials: user info (``https://user:pass@host``) or a signed query."""
    if "://" not in value:
        return False
    try:
        parts = urlsplit(value)
    except ValueError:
        return False
    return bool(parts.username or parts.password) or bool(_SIGNED_QUERY.search(value))


_TOKEN_PREFIX = re.compile(
    r"^(sk-|sk_live_|sk_test_|rk_live_|ghp_|gho_|ghs_|ghu_|github_pat_|glpat-|xox[abprs]-|hf_|"
    r"AKIA|ASIA|AIza|eyJ)[A-Za-z0-9_\-.+/=]{16,}$"
)
"""Credentials that announce themselves: OpenAI/Anthropic (``sk-``), Stripe, GitHub, GitLab,
Slack, Hugging Face, AWS access key ids, Google API keys, JWTs (``eyJ``)."""
_AUTH_SCHEME = re.compile(r"^(bearer|basic|token)\s+\S{8,}$", re.IGNORECASE)
"""An Authorization header's value: ``Bearer <token>``."""
_SEGMENT = re.compile(r"[A-Za-z0-9+/=]+")
_TOKEN = re.compile(r"^[A-Za-z0-9+/=_-]{20,}$")
"""The runs of a value between its separators (``- _ . : ~``): a model name's are short
(``Meta-Llama-3.1-8B-Instruct``), a random token's long."""


def _entropy(text: str) -> float:
    """Shannon entropy in bits per character."""
    n = len(text)
    return -sum(c / n * math.log2(c / n) for c in collections.Counter(text).values())


def looks_secret(value: str) -> bool:
    """Whether a value has the shape of a credential, whatever it is called: a known token prefix
    (``sk-...``, ``ghp_...``, ``AKIA...``, a JWT), an auth scheme with its token (``Bearer ...``),
    a URL carrying credentials, or a long random run (:func:`_random`, :func:`_hexadecimal`).
    Text with spaces, paths and plain URLs are not secrets; names (model ids, import paths, UUIDs
    with their dashes) are cut short by their separators."""
    text = value.strip()
    if not text:
        return False
    if _AUTH_SCHEME.match(text) or is_secret_url(text):
        return True
    if any(ch.isspace() for ch in text) or "://" in text or text.startswith(("/", "./", "~")):
        return False
    if _TOKEN_PREFIX.match(text):
        return True
    runs = _SEGMENT.findall(text)
    if any(_hexadecimal(run) or _random(run) for run in runs):
        return True
    # base64url: '-' and '_' may be part of the token (a UUID's dashes are not: no hex rule here)
    return bool(_TOKEN.match(text)) and _random("".join(runs))


def _hexadecimal(run: str) -> bool:
    """32 or more hex digits, letters and digits both (an Azure key, a hex token)."""
    return (
        len(run) >= 32
        and all(ch in string.hexdigits for ch in run)
        and any(ch.isdigit() for ch in run)
        and any(ch.isalpha() for ch in run)
    )


def _random(run: str) -> bool:
    """A run of 20+ letters and digits that reads as random: upper case, lower case and digits
    that change class often (a word changes class once), at high entropy."""
    if len(run) < 20:
        return False
    classes = [ch.isupper() * 1 + ch.islower() * 2 + ch.isdigit() * 3 for ch in run]
    if len(set(classes) - {0}) < 3:
        return False
    changes = sum(a != b for a, b in itertools.pairwise(classes)) / (len(run) - 1)
    return changes >= 0.4 and _entropy(run) >= 4.0


def _wrap(value: Any, whole: bool = False) -> Any:
    """A credential field's value as secrets (its mappings by their field names, unless
    ``whole``: a header's value is secret whatever its shape)."""
    if isinstance(value, SecretStr) or value is None or isinstance(value, bool):
        return value
    if isinstance(value, str | int | float):
        return SecretStr(str(value)) if str(value) != "" else value
    if isinstance(value, list | tuple):
        return [_wrap(v, whole) for v in value]
    if whole and isinstance(value, dict):
        return {k: _wrap(v, whole) for k, v in value.items()}
    return protect(value)


def protect(value: Any) -> Any:
    """A copy of a suite fragment (mappings, lists, scalars) with every credential a SecretStr."""
    if isinstance(value, dict):
        out: dict[Any, Any] = {}
        for key, item in value.items():
            name = str(key)
            if name.lower() == "headers" and isinstance(item, dict):
                out[key] = {h: _wrap(v, whole=True) for h, v in item.items()}
            elif is_secret_key(name):
                out[key] = _wrap(item)
            else:
                out[key] = protect(item)
        return out
    if isinstance(value, list | tuple):
        return [protect(v) for v in value]
    if isinstance(value, str) and is_secret_url(value):
        return SecretStr(value)
    return value


def _replace_secrets(value: Any, leaf: Callable[[SecretStr], Any]) -> Any:
    if isinstance(value, SecretStr):
        return leaf(value)
    if isinstance(value, dict):
        return {k: _replace_secrets(v, leaf) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_replace_secrets(v, leaf) for v in value]
    return value


def reveal(value: Any) -> Any:
    """A copy with every SecretStr replaced by its value (for user code that takes plain text)."""
    return _replace_secrets(value, SecretStr.get_secret_value)


def mask(value: Any) -> Any:
    """A JSON-ready copy with every secret masked: SecretStr values, and (defence in depth, for
    fragments that were never protected) everything :func:`protect` would make one."""
    return _replace_secrets(protect(value), lambda _: MASK)


def _walk(value: Any, path: str) -> Iterator[tuple[str, Any]]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _walk(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            yield from _walk(item, f"{path}[{index}]")
    else:
        yield path, value


def secret_paths(value: Any, prefix: str = "") -> list[str]:
    """Where a protected fragment holds an inline secret (``target.openai.api_key``)."""
    return [path for path, item in _walk(value, prefix) if isinstance(item, SecretStr)]


def secret_shaped_paths(value: Any, prefix: str = "") -> list[str]:
    """Where a fragment holds a text shaped like a credential (:func:`looks_secret`), whatever
    its field is called (``env.MY_LLM_CREDENTIAL``)."""
    return [
        path for path, item in _walk(value, prefix) if isinstance(item, str) and looks_secret(item)
    ]


def secret_values(value: Any, environ: dict[str, str] | None = None) -> set[str]:
    """The secrets a protected fragment knows: its SecretStr values and the values of the
    variables its ``*_env`` fields name."""
    env = os.environ if environ is None else environ
    found: set[str] = set()
    for path, item in _walk(value, ""):
        if isinstance(item, SecretStr):
            found.add(item.get_secret_value())
        elif isinstance(item, str) and path.rsplit(".", 1)[-1].lower().endswith("_env"):
            named = env.get(item)
            if named:
                found.add(named)
    return found


def secrets_of(*objects: Any, environ: dict[str, str] | None = None) -> set[str]:
    """The secrets of targets and evaluators built in Python (``evaluate_agent``): what the
    ``endpoint`` (a :class:`evalpipe.llm.ChatEndpoint`) of each holds, as :func:`secret_values`."""
    found: set[str] = set()
    for obj in objects:
        obj = getattr(obj, "inner", obj)  # an agent-scoped evaluator
        endpoint = getattr(obj, "endpoint", None)
        dump = getattr(endpoint, "model_dump", None)
        if callable(dump):
            found |= secret_values(protect(dump()), environ)
    return found


class Scrubber:
    """Replaces known secret values (and their URL-quoted forms) in text with ``***``.

    Values shorter than 6 characters are not scrubbed: they would blank out ordinary text and
    are not credentials anyone should use.
    """

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        forms: set[str] = set()
        for secret in secrets:
            if len(secret) < 6:
                continue
            forms.add(secret)
            forms.add(quote(secret, safe=""))
        self._forms = sorted(forms, key=len, reverse=True)

    def __bool__(self) -> bool:
        return bool(self._forms)

    def found(self, text: str) -> bool:
        """Whether ``text`` holds a secret."""
        return any(form in text for form in self._forms)

    def __call__(self, text: str) -> str:
        """``text`` with every secret masked."""
        for form in self._forms:
            if form in text:
                text = text.replace(form, MASK)
        return text
