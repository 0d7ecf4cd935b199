"""The secret model: which fields are credentials, how they are masked and scrubbed, and where they
stay secret types from parsing to the HTTP layer."""

from __future__ import annotations

import json

import pytest
from pydantic import SecretStr

from evalpipe.llm import ChatEndpoint
from evalpipe.secrets import (
    MASK,
    Scrubber,
    is_secret_key,
    is_secret_url,
    looks_secret,
    mask,
    protect,
    reveal,
    secret_paths,
    secret_values,
    secrets_of,
)
from evalpipe.suite import EvalSuite
from evalpipe.targets.openai_chat import OpenAIChatAgent


@pytest.mark.parametrize(
    "name",
    [
        "api_key",
        "apiKey",
        "API-KEY",
        "token",
        "password",
        "client_secret",
        "connection_string",
        "subscription_key",
        "sas_token",
        "openai_api_key",
        "github_token",
    ],
)
def test_credential_names_are_secret(name: str) -> None:
    """Credential-named fields (any case, - or _) are secrets."""
    assert is_secret_key(name)


@pytest.mark.parametrize(
    "name", ["api_key_env", "model", "base_url", "credential", "max_tokens", "monkey", "keywords"]
)
def test_other_names_are_not_secret(name: str) -> None:
    """*_env fields name a variable; a credential import path and ordinary fields are not secrets."""
    assert not is_secret_key(name)


@pytest.mark.parametrize(
    "value",
    [
        "sk-proj-Zq8mW3kT1vB6nR0pL4sX9yD2fH7jK5aQ",
        "sk-ant-api03-aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY",
        "Bearer x7Kp2Lm9Qr4St8Vw",
        "ghp_0123456789abcdefABCDEF0123456789abcd",
        "AKIAIOSFODNN7EXAMPLE",
        "3f9a1c7e5b2d4f8a0c6e1b3d5f7a9c2e",  # 32 hex digits: an Azure OpenAI key's shape
        "Zq8mW3kT1vB6nR0pL4sX9yD2fH7jK5aQ-Xc",  # base64url, no prefix
        "mtQCO+oM/4drP1vAz7PwpcKfJhR+i6N1qwS39/oO",  # base64
        "https://user:pw@example.com/v1",
    ],
)
def test_secret_shaped_values_are_found_whatever_their_name(value: str) -> None:
    """Regression (issue 34): `evalpipe deploy` found secrets by name only. Token prefixes, auth
    schemes, credential URLs and long random strings are secrets by their shape."""
    assert looks_secret(value)


@pytest.mark.parametrize(
    "value",
    [
        "gpt-4o-mini-2024-07-18",
        "Meta-Llama-3.1-8B-Instruct-Q4_K_M",
        "llama3.1:8b-instruct-q4_K_M",
        "anthropic.claude-3-5-sonnet-20240620-v1:0",
        "examples.travel.checks:concise",
        "b586a180-0c74-4faa-b1bd-b64389629e04",  # a UUID with its dashes: an id, not a key
        "20261207T081441-64760ab114fc",
        "http://127.0.0.1:8765",
        "/data/evals/runs",
        "OPENAI_API_KEY",
        "You are a careful judge. Answer with a score from 1 to 5.",
        "{{ prefect.blocks.secret.openai-api-key }}",
    ],
)
def test_names_paths_and_text_are_not_secret_shaped(value: str) -> None:
    """Model ids, import paths, run names, URLs, paths, variable names and prose are not secrets
    (a deployment holding them must not be refused)."""
    assert not looks_secret(value)


def test_credential_urls_are_secret() -> None:
    """URLs with user info or a signed query are secrets; plain URLs are not."""
    assert is_secret_url("https://user:pw@example.com/v1")
    assert is_secret_url("https://acct.blob.core.windows.net/c?sv=2024&sig=abc")
    assert is_secret_url("https://example.com/hook?token=abc")
    assert not is_secret_url("https://example.com/v1?model=x")
    assert not is_secret_url("not a url sig=")


def test_protect_wraps_keys_every_header_and_credential_urls() -> None:
    """Every header value is a secret whatever its name; *_env and other fields stay plain."""
    out = protect(
        {
            "openai": {
                "api_key": "sk-1",
                "api_key_env": "KEY_VAR",
                "model": "m",
                "headers": {"X-Api-Key": "h-1", "Ocp-Apim-Subscription-Key": "h-2", "X-Trace": "t"},
                "webhook": "https://u:p@host/x",
                "tools": [{"password": 7}],
            }
        }
    )
    spec = out["openai"]
    assert isinstance(spec["api_key"], SecretStr)
    assert spec["api_key_env"] == "KEY_VAR"
    assert spec["model"] == "m"
    assert all(isinstance(v, SecretStr) for v in spec["headers"].values())
    assert isinstance(spec["webhook"], SecretStr)
    assert spec["tools"][0]["password"].get_secret_value() == "7"
    assert secret_paths(out, "target") == [
        "target.openai.api_key",
        "target.openai.headers.X-Api-Key",
        "target.openai.headers.Ocp-Apim-Subscription-Key",
        "target.openai.headers.X-Trace",
        "target.openai.webhook",
        "target.openai.tools[0].password",
    ]
    assert reveal(out)["openai"]["headers"]["X-Api-Key"] == "h-1"


def test_mask_hides_secrets_and_keeps_the_shape() -> None:
    """mask() writes *** for SecretStr and for unprotected credential fields; empty stays empty."""
    data = {"a": SecretStr("s"), "token": "", "headers": {"H": "v"}, "url": "https://u:p@h", "n": 1}
    assert mask(data) == {"a": MASK, "token": "", "headers": {"H": MASK}, "url": MASK, "n": 1}


def test_secret_values_include_the_variables_env_fields_name() -> None:
    """The run knows inline values and the values of the variables *_env fields name."""
    fragment = protect({"judge": {"api_key": "inline-secret", "api_key_env": "JUDGE_KEY"}})
    assert secret_values(fragment, {"JUDGE_KEY": "from-env-secret"}) == {
        "inline-secret",
        "from-env-secret",
    }


def test_scrubber_masks_raw_and_url_quoted_forms_and_skips_short_values() -> None:
    """Known secrets (>= 6 characters) are masked raw and URL-quoted; short values are left."""
    scrub = Scrubber(["sk-abc/def+1", "abc"])
    assert scrub("Incorrect API key: Bearer sk-abc/def+1") == f"Incorrect API key: Bearer {MASK}"
    assert scrub("key=sk-abc%2Fdef%2B1&x=1") == f"key={MASK}&x=1"
    assert scrub("abc stays") == "abc stays"
    assert not Scrubber(["abc"])


def test_suite_secrets_are_secret_types_and_masked_in_identity_and_json() -> None:
    """A parsed suite holds SecretStr; its identity and JSON dump never hold the value, and a
    rotated key keeps the target's identity while a new model changes it."""
    spec = {"openai": {"base_url": "http://127.0.0.1:9/v1", "model": "m", "api_key": "sk-rot-1"}}
    suite = EvalSuite(
        name="s", dataset="q.jsonl", target=spec, evaluators=[{"judge": {"api_key": "sk-judge-1"}}]
    )
    assert isinstance(suite.target["openai"]["api_key"], SecretStr)
    assert "sk-rot-1" not in suite.target_identity()
    dumped = suite.model_dump_json()
    assert "sk-rot-1" not in dumped
    assert "sk-judge-1" not in dumped
    base = {"name": "s", "dataset": "q.jsonl", "evaluators": ["exact_match"]}
    rotated = EvalSuite(**base, target={"openai": {**spec["openai"], "api_key": "sk-rot-2"}})
    assert rotated.target_identity() == suite.target_identity()
    other = EvalSuite(**base, target={"openai": {**spec["openai"], "model": "m2"}})
    assert other.target_identity() != suite.target_identity()


def test_endpoint_headers_are_secret_until_the_request() -> None:
    """ChatEndpoint headers are SecretStr (masked in repr and JSON); the objects' secrets are
    found for the run's scrubber."""
    ep = ChatEndpoint(base_url="http://127.0.0.1:9/v1", model="m", headers={"X-Api-Key": "hdr-1"})
    assert "hdr-1" not in repr(ep)
    assert "hdr-1" not in ep.model_dump_json()
    assert json.loads(ep.model_dump_json())["headers"] == {"X-Api-Key": "**********"}
    agent = OpenAIChatAgent(base_url="http://127.0.0.1:9/v1", model="m", api_key="sk-agent-1")
    assert secrets_of(agent, object(), None) == {"sk-agent-1"}
    assert secrets_of(ep) == set()  # an endpoint is looked for on the object, not taken as one
