"""The annotation server's API through FastAPI's test client (the browser tests drive the page)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from tests.hostile import make_fifo

from beacon.annotate.labels import LabelLog
from beacon.annotate.records import load_rows
from beacon.annotate.server import Session, allowed_hosts, create_app


@pytest.fixture
def session(annotation_file: Path) -> Session:
    log = LabelLog(annotation_file.with_name("labels.jsonl"))
    return Session(file=annotation_file, rows=load_rows(annotation_file), log=log, annotator="ann")


@pytest.fixture
def client(session: Session) -> TestClient:
    """A client of a page loaded once: every write carries that load's token, as app.js does."""
    client = TestClient(create_app(session), base_url="http://127.0.0.1:8765")
    client.headers["X-Beacon-Token"] = page_token(client)
    return client


def page_token(client: TestClient) -> str:
    match = re.search(r'<meta name="beacon-token" content="([^"]+)">', client.get("/").text)
    assert match is not None
    return match[1]


def import_json(client: TestClient, text: str, annotator: str = "") -> object:
    return client.post("/api/import", json={"text": text, "annotator": annotator})


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
    result = import_json(client, exported, annotator="carol")
    assert result.json() == {"imported": 1}
    assert session.log.latest("bob")[rid]["stage"] == "OTHER"  # the label keeps its annotator

    foreign = exported.replace('"id": "synth/', '"id": "other/')
    refused = import_json(client, foreign)
    assert refused.status_code == 400
    assert "6 of 6 rows whose ids are not in sample.jsonl" in refused.json()["detail"]
    garbage = import_json(client, "{not json")
    assert "line 1: not valid JSON" in garbage.json()["detail"]


def test_labels_carried_in_the_file_count_for_their_annotator(annotation_file: Path) -> None:
    rows = [json.loads(x) for x in annotation_file.read_text().splitlines()]
    rows[0]["label"] = {"stage": "ACQUIRE", "note": "from file", "annotator": "bob"}
    annotation_file.write_text("".join(json.dumps(r) + "\n" for r in rows))
    log = LabelLog(annotation_file.with_name("labels.jsonl"))
    session = Session(annotation_file, load_rows(annotation_file), log, annotator="ann")
    assert session.labels("bob")[rows[0]["id"]]["stage"] == "ACQUIRE"
    assert rows[0]["id"] not in session.labels("ann")


# --- what the page trusts: its own host name, its own page's writes, files under its folder ---


def test_writes_need_json_and_the_token_of_a_page_this_server_served(
    client: TestClient, session: Session
) -> None:
    """A cross-site form posts text/plain (no preflight) and cannot read the page's token."""
    rid = session.rows[0].id
    label = {"id": rid, "stage": "READ"}
    exported = session.file.read_text().replace('"label": null', '"label": {"stage": "OTHER"}')
    bare = TestClient(client.app, base_url="http://127.0.0.1:8765")  # no token
    assert bare.post("/api/labels", json=label).status_code == 403
    forged = bare.post("/api/labels", json=label, headers={"X-Beacon-Token": "guess"})
    assert forged.status_code == 403 and "reload the page" in forged.json()["detail"]
    as_form = client.post("/api/import", content=exported, headers={"content-type": "text/plain"})
    assert as_form.status_code == 415
    as_text = client.post("/api/labels", content=json.dumps(label))  # no Content-Type at all
    assert as_text.status_code == 415
    assert session.log.entries() == []
    assert client.post("/api/labels", json=label).status_code == 200
    second_tab = page_token(bare)  # each page load gets its own token, all of them valid
    assert second_tab != client.headers["X-Beacon-Token"]
    saved = bare.post("/api/labels", json=label, headers={"X-Beacon-Token": second_tab})
    assert saved.status_code == 200 and len(session.log.entries()) == 2


def test_only_its_own_host_names_are_answered(session: Session) -> None:
    """DNS rebinding: a page at evil.example:8765 whose name now points at 127.0.0.1."""
    app = create_app(session)
    for host in ("127.0.0.1:8765", "localhost:8765", "[::1]:8765", "LOCALHOST"):
        assert TestClient(app).get("/api/rows", headers={"host": host}).status_code == 200
    for host in ("evil.example:8765", "127.0.0.1.evil.example", "", "[::1"):
        refused = TestClient(app).get("/api/rows", headers={"host": host})
        assert refused.status_code == 400 and "--allowed-host" in refused.text
    lan = create_app(session, allowed_hosts("192.168.1.5", ["annotate.lan"]))
    assert TestClient(lan).get("/", headers={"host": "annotate.lan:80"}).status_code == 200
    assert TestClient(lan).get("/", headers={"host": "localhost"}).status_code == 400
    assert {"localhost", "127.0.0.1", "::1"} <= allowed_hosts("0.0.0.0")


def test_export_file_name_is_sanitised(client: TestClient) -> None:
    who = 'x"; filename="../../.bashrc\r\nSet-Cookie: a=b'
    response = client.get("/api/export", params={"annotator": who})
    assert response.status_code == 200 and "set-cookie" not in response.headers
    disposition = response.headers["content-disposition"]
    assert disposition == (
        'attachment; filename="sample.x_filename_bashrc_Set-Cookie_a_b.labelled.jsonl"'
    )


def test_images_outside_the_folder_or_not_regular_are_not_served(
    annotation_file: Path, tmp_path: Path
) -> None:
    (tmp_path.parent / "secret.png").write_bytes(b"not yours")
    os.symlink(tmp_path.parent / "secret.png", tmp_path / "inside.png")
    make_fifo(tmp_path / "fifo.png")
    rows = [json.loads(line) for line in annotation_file.read_text().splitlines()]
    rows[0]["images"] = ["../secret.png", str(tmp_path.parent / "secret.png"), "inside.png"]
    rows[0]["images"] += ["fifo.png", rows[1]["images"][0]]
    annotation_file.write_text("".join(json.dumps(row) + "\n" for row in rows))
    log = LabelLog(annotation_file.with_name("labels.jsonl"))
    session = Session(annotation_file, load_rows(annotation_file), log, annotator="ann")
    client = TestClient(create_app(session), base_url="http://127.0.0.1")
    images = client.get("/api/rows").json()["rows"][0]["images"]
    assert [image["ok"] for image in images] == [False, False, False, False, True]
    assert [client.get(image["url"]).status_code for image in images] == [404] * 4 + [200]
