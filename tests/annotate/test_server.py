"""The annotation server's API through FastAPI's test client (the browser tests drive the page)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from beacon.annotate.labels import LabelLog
from beacon.annotate.records import load_rows
from beacon.annotate.server import Session, create_app


@pytest.fixture
def session(annotation_file: Path) -> Session:
    log = LabelLog(annotation_file.with_name("labels.jsonl"))
    return Session(file=annotation_file, rows=load_rows(annotation_file), log=log, annotator="ann")


@pytest.fixture
def client(session: Session) -> TestClient:
    return TestClient(create_app(session))


def test_rows_show_images_segments_and_critic(client: TestClient) -> None:
    data = client.get("/api/rows").json()
    assert data["labels"] == ["CORRECT", "ACQUIRE", "READ", "GROUND", "OTHER", "SKIP"]
    row = data["rows"][1]
    assert (row["group_type"], row["critic"]["stage"], row["tool_calls"]) == ("mixed", "CORRECT", 1)
    assert [s["role"] for s in row["segments"]][:3] == ["prompt", "generated", "generated"]
    crop = row["segments"][3]["images"][0]
    assert crop["ok"] and client.get(crop["url"]).headers["content-type"] == "image/png"
    assert client.get(row["images"][0]["url"]).status_code == 200
    assert client.get("/api/images/999").status_code == 404
    page = client.get("/")
    assert page.status_code == 200 and "static/app.js" in page.text
    assert client.get("/static/app.js").status_code == 200


def test_label_saved_per_annotator_and_exported(client: TestClient, session: Session) -> None:
    rid = session.rows[0].id
    saved = client.post("/api/labels", json={"id": rid, "stage": "READ", "note": "n1"}).json()
    assert saved["saved"]["annotator"] == "ann"
    client.post("/api/labels", json={"id": rid, "stage": "GROUND", "note": "", "annotator": "bob"})
    assert client.get("/api/labels").json()["labels"][rid]["stage"] == "READ"
    assert client.get("/api/labels?annotator=bob").json()["labels"][rid]["stage"] == "GROUND"
    exported = [json.loads(x) for x in client.get("/api/export").text.splitlines()]
    original = [json.loads(x) for x in session.file.read_text().splitlines()]
    assert exported[0] == {
        **original[0],
        "label": {"stage": "READ", "note": "n1", "annotator": "ann"},
    }
    assert exported[1:] == original[1:]


def test_bad_labels_are_refused_with_reasons(client: TestClient) -> None:
    missing = client.post("/api/labels", json={"id": "nope", "stage": "READ"})
    assert missing.status_code == 404 and "no rollout with id 'nope'" in missing.json()["detail"]
    bad = client.post("/api/labels", json={"id": "synth/0/tool/0", "stage": "PERCEIVE"})
    assert bad.status_code == 422


def test_import_round_trip_and_foreign_file(client: TestClient, session: Session) -> None:
    rid = session.rows[2].id
    client.post("/api/labels", json={"id": rid, "stage": "OTHER", "annotator": "bob"})
    exported = client.get("/api/export?annotator=bob").text
    result = client.post(
        "/api/import?annotator=carol", content=exported, headers={"content-type": "text/plain"}
    )
    assert result.json() == {"imported": 1}
    assert session.log.latest("bob")[rid]["stage"] == "OTHER"  # the label keeps its annotator

    foreign = exported.replace('"id": "synth/', '"id": "other/')
    refused = client.post("/api/import", content=foreign, headers={"content-type": "text/plain"})
    assert refused.status_code == 400
    assert "6 of 6 rows whose ids are not in sample.jsonl" in refused.json()["detail"]
    garbage = client.post(
        "/api/import", content="{not json", headers={"content-type": "text/plain"}
    )
    assert "line 1: not valid JSON" in garbage.json()["detail"]


def test_labels_carried_in_the_file_count_for_their_annotator(annotation_file: Path) -> None:
    rows = [json.loads(x) for x in annotation_file.read_text().splitlines()]
    rows[0]["label"] = {"stage": "ACQUIRE", "note": "from file", "annotator": "bob"}
    annotation_file.write_text("".join(json.dumps(r) + "\n" for r in rows))
    log = LabelLog(annotation_file.with_name("labels.jsonl"))
    session = Session(annotation_file, load_rows(annotation_file), log, annotator="ann")
    assert session.labels("bob")[rows[0]["id"]]["stage"] == "ACQUIRE"
    assert rows[0]["id"] not in session.labels("ann")
