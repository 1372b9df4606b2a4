"""docs/sessions-openapi.json is the session part of the proxy's own OpenAPI document."""

from pathlib import Path

from distrs.proxy.openapi_export import openapi_part, render_openapi

ROOT = Path(__file__).resolve().parents[3]


def test_sessions_openapi_doc_is_current() -> None:
    assert (ROOT / "docs" / "sessions-openapi.json").read_text() == render_openapi(), (
        "run: distrs config openapi --out docs/sessions-openapi.json"
    )


def test_it_documents_every_session_route_and_its_bodies() -> None:
    doc = openapi_part(("/v1/sessions",))
    assert set(doc["paths"]) >= {
        "/v1/sessions",
        "/v1/sessions/{session_id}",
        "/v1/sessions/{session_id}/exec",
        "/v1/sessions/{session_id}/files",
        "/v1/sessions/{session_id}/files/{path}",
        "/v1/sessions/{session_id}/reward",
    }
    create = doc["paths"]["/v1/sessions"]["post"]
    assert create["requestBody"]["content"]["application/json"]["schema"]["title"] == "SessionCreate"
    assert {"201", "429", "503"} <= set(create["responses"])
    schemas = doc["components"]["schemas"]
    assert {"ExecResult", "SessionInfo", "SessionLimits"} <= set(schemas)
    assert "state_survived" in schemas["ExecResult"]["properties"]
