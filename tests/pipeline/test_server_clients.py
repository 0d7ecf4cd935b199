"""The Prefect settings a run's clients get for the API URL evalpipe chose itself
(evalpipe.pipeline.server._client_settings): no CA bundle loaded for a plain-HTTP API, no version
check of the embedded server; and how the requests to local servers take no answer. No server is
started."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest
from prefect.client.orchestration import get_client
from prefect.settings import (
    PREFECT_API_SSL_CERT_FILE,
    PREFECT_API_URL,
    PREFECT_CLIENT_SERVER_VERSION_CHECK_ENABLED,
    temporary_settings,
)

from evalpipe.pipeline import server
from evalpipe.pipeline.server import _client_settings

URL = "http://127.0.0.1:45678/api"


def _subjects(cafile: str) -> list[str]:
    certs = ssl.create_default_context(cafile=cafile).get_ca_certs()
    return [dict(pair[0] for pair in cert["subject"])["commonName"] for cert in certs]


def test_a_plain_http_api_gets_the_one_certificate_ca_file(tmp_path: Path) -> None:
    """For http://, the clients' CA file is evalpipe's own file of one certificate (no bundle)."""
    updates = _client_settings(URL, tmp_path, embedded=True)
    assert updates[PREFECT_API_URL] == URL
    cafile = updates[PREFECT_API_SSL_CERT_FILE]
    assert Path(cafile) == tmp_path / "no-tls-ca.pem"
    assert Path(cafile).read_text(encoding="ascii") == server._NO_TLS_CA
    assert _subjects(cafile) == ["evalpipe: no TLS to the loopback Prefect API"]
    assert list(tmp_path.iterdir()) == [tmp_path / "no-tls-ca.pem"]  # no temporary file left


def test_prefect_clients_of_the_run_use_that_ca_file(tmp_path: Path) -> None:
    """A Prefect client made under the settings verifies with that file's one certificate."""
    with temporary_settings(updates=_client_settings(URL, tmp_path, embedded=True)):
        client = get_client()
        context = client._client._transport._pool._ssl_context  # httpx's verify context
    assert isinstance(context, ssl.SSLContext)
    names = [dict(p[0] for p in c["subject"])["commonName"] for c in context.get_ca_certs()]
    assert names == ["evalpipe: no TLS to the loopback Prefect API"]


@pytest.mark.parametrize(
    "url", ["https://127.0.0.1:4200/api", "https://prefect.example/api", "http://10.1.2.3:4200/api"]
)
def test_https_or_another_host_keeps_the_configured_ca_file(tmp_path: Path, url: str) -> None:
    """https:// (TLS verification as configured), or http:// to another host (clients elsewhere
    would not have the file), gets no CA file of evalpipe's."""
    updates = _client_settings(url, tmp_path, embedded=False)
    assert updates[PREFECT_API_URL] == url
    assert PREFECT_API_SSL_CERT_FILE not in updates
    assert not (tmp_path / "no-tls-ca.pem").exists()


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "[::1]"])
def test_every_loopback_name_gets_the_ca_file(tmp_path: Path, host: str) -> None:
    """http:// to this machine under any of its loopback names gets the one-certificate file."""
    updates = _client_settings(f"http://{host}:4200/api", tmp_path, embedded=False)
    assert updates[PREFECT_API_SSL_CERT_FILE] == str(tmp_path / "no-tls-ca.pem")


def test_only_the_embedded_server_skips_the_version_check(tmp_path: Path) -> None:
    """The embedded server (of this Prefect version) is not version-checked; a found one is."""
    assert (
        _client_settings(URL, tmp_path, embedded=True)[PREFECT_CLIENT_SERVER_VERSION_CHECK_ENABLED]
        is False
    )
    assert PREFECT_CLIENT_SERVER_VERSION_CHECK_ENABLED not in _client_settings(
        URL, tmp_path, embedded=False
    )


def test_a_changed_ca_file_is_written_again(tmp_path: Path) -> None:
    """A CA file that differs from evalpipe's (edited, truncated) is replaced before use."""
    (tmp_path / "no-tls-ca.pem").write_text("not a certificate\n", encoding="ascii")
    cafile = _client_settings(URL, tmp_path, embedded=True)[PREFECT_API_SSL_CERT_FILE]
    assert Path(cafile).read_text(encoding="ascii") == server._NO_TLS_CA


def test_no_ca_file_when_it_cannot_be_written(tmp_path: Path) -> None:
    """When the file cannot be written, the clients keep Prefect's own CA file (no setting)."""
    blocked = tmp_path / "a-file"
    blocked.write_text("", encoding="ascii")  # the state directory cannot be made under a file
    updates = _client_settings(URL, blocked / "evalpipe-server", embedded=True)
    assert PREFECT_API_SSL_CERT_FILE not in updates
    assert updates[PREFECT_CLIENT_SERVER_VERSION_CHECK_ENABLED] is False


def test_a_local_address_that_does_not_answer_is_neither_healthy_nor_a_home() -> None:
    """The requests to local servers (urllib, loaded on first use) report a refused connection
    as no answer, not as an error."""
    import socket

    with socket.socket() as sock:  # a port of this machine that nothing listens on
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        assert server._healthy(f"{url}/api", timeout=2.0) is False
        assert server._home_of(url, timeout=2.0) is None
