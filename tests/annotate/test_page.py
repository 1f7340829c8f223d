"""The annotation page in headless Chromium (Debian's `chromium`, driven by Playwright).

Skipped, with the reason, only where /usr/bin/chromium or the playwright package is missing;
`.ci/run` installs both, so they run in CI.
"""

from __future__ import annotations

import json
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from html import escape
from pathlib import Path

import pytest
import uvicorn

from beacon.annotate.labels import LabelLog
from beacon.annotate.records import load_rows
from beacon.annotate.server import Session, bind, create_app, url_of

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--host-resolver-rules=MAP rebind.test 127.0.0.1",  # a DNS rebinding, for one test
]
if shutil.which(CHROMIUM) is None:
    pytest.skip(
        f"no {CHROMIUM}: install Debian's browser with `apt-get install -y chromium` (CI does)",
        allow_module_level=True,
    )
sync_api = pytest.importorskip(
    "playwright.sync_api", reason="the playwright package is missing: pip install -e '.[dev]'"
)


@pytest.fixture(scope="module")
def browser() -> Iterator:
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield browser
        browser.close()


@pytest.fixture
def served(annotation_file: Path) -> Iterator[tuple[str, Session]]:
    """The app on a free localhost port, in a thread of this process."""
    log = LabelLog(annotation_file.with_name("labels.jsonl"))
    session = Session(annotation_file, load_rows(annotation_file), log, annotator="tester")
    sock = bind("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(create_app(session), log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    wait_until(lambda: server.started)
    yield url_of(sock), session
    server.should_exit = True
    thread.join(timeout=10)
    sock.close()


def wait_until(condition: Callable[[], object], what: str = "condition") -> None:
    """Poll until `condition()` holds; a wait, not a timing assertion (fails only if never)."""
    for _ in range(600):
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"{what} never held")


def open_page(browser, url: str, annotator: str | None = None):
    page = browser.new_context(viewport={"width": 1440, "height": 900}).new_page()
    page.goto(url)
    page.wait_for_selector(".seg")
    if annotator:
        page.fill("#annotator", annotator)
        page.keyboard.press("Escape")  # leaves the field: the page reloads that annotator's labels
        page.wait_for_selector(f"#export[href$='annotator={annotator}']")
    return page


def upload(page, name: str, data: bytes) -> None:
    page.set_input_files(
        "#import", files=[{"name": name, "mimeType": "text/plain", "buffer": data}]
    )


def rows_of(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_label_with_keys_reload_and_export(browser, served, tmp_path: Path) -> None:
    url, session = served
    page = open_page(browser, url)
    first = session.rows[0].id
    assert page.locator("#critic-body").is_hidden()  # the critic label starts collapsed
    page.keyboard.press("r")
    assert "CORRECT" in page.inner_text("#critic-body")
    page.keyboard.press("3")
    page.wait_for_selector("#saved:has-text('Saved READ')")
    page.keyboard.press("n")
    page.keyboard.type("crop misses the label")
    page.keyboard.press("Escape")
    wait_until(lambda: session.log.latest("tester").get(first, {}).get("note"), "note saved")
    page.screenshot(path=str(tmp_path / "page.png"), full_page=True)

    page.reload()
    page.wait_for_selector(".seg")
    assert page.locator("#critic-body").is_hidden()
    assert page.get_attribute(".choice[data-stage=READ]", "aria-pressed") == "true"
    assert page.input_value("#note") == "crop misses the label"
    assert page.inner_text("#progress-text") == "1 / 6 labelled"

    page.keyboard.press("j")
    page.keyboard.press("0")
    page.wait_for_selector("#saved:has-text('Saved SKIP')")
    assert page.inner_text("#progress-text") == "2 / 6 labelled"
    with page.expect_download() as download:
        page.click("#export")
    exported = rows_of(Path(download.value.path()))
    expected = rows_of(session.file)
    expected[0]["label"] = {"stage": "READ", "note": "crop misses the label", "annotator": "tester"}
    expected[1]["label"] = {"stage": "SKIP", "note": "", "annotator": "tester"}
    assert exported == expected


def test_two_annotators_at_once_lose_nothing(browser, served) -> None:
    url, session = served
    alice, bob = open_page(browser, url, "alice"), open_page(browser, url, "bob")
    n = len(session.rows)
    for _ in range(n):  # both press without waiting for the other's save
        alice.keyboard.press("2")
        bob.keyboard.press("4")
        alice.keyboard.press("j")
        bob.keyboard.press("j")
    wait_until(lambda: len(session.log.entries()) == 2 * n, "every label saved")
    assert {e["stage"] for e in session.log.latest("alice").values()} == {"ACQUIRE"}
    assert {e["stage"] for e in session.log.latest("bob").values()} == {"GROUND"}
    assert len(session.log.latest("alice")) == len(session.log.latest("bob")) == n
    for page in (alice, bob):
        page.reload()
        page.wait_for_selector(".seg")
        assert page.inner_text("#progress-text") == f"{n} / {n} labelled"


def test_import_reports_corrupt_and_foreign_files(browser, served) -> None:
    url, session = served
    page = open_page(browser, url)
    upload(page, "bad.jsonl", b'{"id": "synth/0/tool/0", "gro\n')
    page.wait_for_selector("#banner.error")
    banner = page.inner_text("#banner")
    assert "Could not import bad.jsonl" in banner and "line 1: not valid JSON" in banner

    foreign = json.dumps({"key": "synth/0/tool/0", "correct": True}).encode()
    upload(page, "samples.jsonl", foreign)
    page.wait_for_selector("#banner:has-text('samples.jsonl')")
    banner = page.inner_text("#banner")
    assert "id: Field required" in banner and "beacon annotate sample RUN" in banner

    theirs = rows_of(session.file)
    theirs[3]["label"] = {"stage": "GROUND", "note": "imported", "annotator": ""}
    text = "".join(json.dumps(r) + "\n" for r in theirs).encode()
    upload(page, "theirs.jsonl", text)
    page.wait_for_selector("#banner.info")
    assert "Imported 1 label(s)" in page.inner_text("#banner")
    assert session.log.latest("tester")[theirs[3]["id"]]["stage"] == "GROUND"
    assert page.inner_text("#progress-text") == "1 / 6 labelled"


def test_filters_and_navigation(browser, served) -> None:
    url, _ = served
    page = open_page(browser, url)
    page.select_option("#f-group", "all_wrong")
    assert page.locator("#list li").count() == 2
    assert "all-wrong" in page.inner_text("#sample .ids")
    page.keyboard.press("5")
    page.wait_for_selector("#saved:has-text('Saved OTHER')")
    page.select_option("#f-group", "")
    page.select_option("#f-status", "unlabelled")
    assert page.locator("#list li").count() == 5
    page.select_option("#f-status", "")
    page.select_option("#f-stage", "OTHER")
    assert page.locator("#list li").count() == 1
    page.select_option("#f-stage", "")
    page.keyboard.press("u")  # next unlabelled skips the labelled rollout
    assert page.evaluate("location.hash") != ""
    assert page.locator(".seg.obs img").count() == 1  # the sandbox's image is shown


ATTACKER = """<!doctype html><html><body>
<form id="f" method="POST" enctype="text/plain" action="{url}api/import">
<input name="{name}" value="{value}"></form>
<script>
fetch("{url}api/labels", {{method: "POST", mode: "no-cors",
  body: new Blob(['{{"id": "synth/0/tool/0", "stage": "OTHER", "annotator": "tester"}}'])}})
  .finally(() => document.getElementById("f").submit());
</script></body></html>"""


def test_a_cross_site_page_cannot_write_labels(browser, served) -> None:
    """Another site's form (text/plain: no preflight) posts an export line with a forged label,
    `name=value` making it valid JSON, and a no-cors fetch posts a label: nothing is saved."""
    url, session = served
    theirs = rows_of(session.file)[0]
    theirs["label"] = {"stage": "OTHER", "note": "forged", "annotator": "tester"}
    line = json.dumps(theirs)[:-1] + ', "pad": "'  # the form adds '=' and the value '"}'
    html = ATTACKER.format(url=url, name=escape(line), value=escape('"}'))
    page = browser.new_context().new_page()
    page.route("http://attacker.test/", lambda r: r.fulfill(body=html, content_type="text/html"))
    with page.expect_response(lambda r: r.url.endswith("api/import")) as posted:
        page.goto("http://attacker.test/")
    assert posted.value.status == 415
    assert session.log.entries() == []


def test_a_rebound_host_name_gets_nothing(browser, served) -> None:
    """DNS rebinding: rebind.test now resolves to 127.0.0.1, so its pages could read the rows."""
    url, _ = served
    port = url.rstrip("/").rsplit(":", 1)[1]
    page = browser.new_context().new_page()
    response = page.goto(f"http://rebind.test:{port}/api/rows")
    assert response.status == 400 and "synth/0/tool/0" not in page.content()
    assert "--allowed-host" in page.content()
