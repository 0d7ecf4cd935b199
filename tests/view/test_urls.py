"""view/urls.py: where the Prefect UI's page of a run's flow run is, from the environment."""

from __future__ import annotations

import pytest

from evalpipe.view.urls import flow_run_url

RUN_ID = "0b8e3c5e-5d0f-4a4e-9d3e-2f1c8a7b6d5e"


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({"PREFECT_UI_URL": "http://ui.internal:4200/"}, "http://ui.internal:4200"),
        ({"PREFECT_API_URL": "http://127.0.0.1:4200/api"}, "http://127.0.0.1:4200"),
        ({"PREFECT_API_URL": "https://prefect.example/api/"}, "https://prefect.example"),
        (
            {"PREFECT_UI_URL": "http://ui:8080", "PREFECT_API_URL": "http://api:4200/api"},
            "http://ui:8080",
        ),
    ],
)
def test_the_ui_url_or_the_api_url_without_api_gives_the_flow_run_page(
    environ: dict[str, str], expected: str
) -> None:
    """PREFECT_UI_URL wins; else PREFECT_API_URL without its /api suffix is the UI's root."""
    assert flow_run_url(RUN_ID, environ) == f"{expected}/runs/flow-run/{RUN_ID}"


@pytest.mark.parametrize(
    ("flow_run_id", "environ"),
    [
        (None, {"PREFECT_API_URL": "http://127.0.0.1:4200/api"}),
        ("", {"PREFECT_API_URL": "http://127.0.0.1:4200/api"}),
        (RUN_ID, {}),
        (RUN_ID, {"PREFECT_API_URL": "http://127.0.0.1:4200/elsewhere"}),
        (RUN_ID, {"PREFECT_UI_URL": "javascript:alert(1)"}),
        (RUN_ID, {"PREFECT_API_URL": "javascript:alert(1)//api"}),
    ],
)
def test_no_link_without_a_flow_run_id_or_a_known_http_ui(
    flow_run_id: str | None, environ: dict[str, str]
) -> None:
    """No flow run recorded, no UI configured, or a URL that is not http(s): no link at all."""
    assert flow_run_url(flow_run_id, environ) is None


def test_the_flow_run_id_is_one_encoded_path_segment() -> None:
    """An id from a run's manifest is data: it cannot add path segments or a query."""
    url = flow_run_url("../../api/admin?x=1", {"PREFECT_UI_URL": "http://ui"})
    assert url == "http://ui/runs/flow-run/..%2F..%2Fapi%2Fadmin%3Fx%3D1"
