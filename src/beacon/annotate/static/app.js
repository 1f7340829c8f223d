// Beacon annotation page: plain JS, no build step. The server owns the data: every choice and
// note is POSTed to api/labels as it is made, so a closed tab loses nothing. Every write is JSON
// and carries the token the server put into this page load (a write without it is refused).
"use strict";

const STAGE_HELP = {
  CORRECT: "right answer, sound evidence chain",
  ACQUIRE: "never got an image that shows the fact",
  READ: "had the evidence, misread it",
  GROUND: "read it right, mapped it to a wrong answer",
  OTHER: "failed outside the evidence chain",
  SKIP: "cannot judge this one",
};
const KEY_OF = { CORRECT: "1", ACQUIRE: "2", READ: "3", GROUND: "4", OTHER: "5", SKIP: "0" };

const state = { rows: [], labels: {}, choices: [], current: null, revealed: false, file: "" };
const $ = (id) => document.getElementById(id);
const TOKEN = document.querySelector('meta[name="beacon-token"]').content;
let noteTimer = null;

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v);
  }
  for (const child of children) if (child != null) node.append(child);
  return node;
}

function annotator() { return $("annotator").value.trim() || state.defaultAnnotator; }

function banner(message, kind = "error") {
  const b = $("banner");
  b.textContent = message;
  b.className = kind;
  b.hidden = !message;
}

async function api(path, options = {}) {
  const response = await fetch(path, options);
  if (!response.ok) {
    let detail = `${response.status} ${response.statusText}`;
    try { const body = await response.json(); detail = typeof body.detail === "string" ? body.detail : JSON.stringify(body.detail); } catch (_) { /* not JSON */ }
    throw new Error(detail);
  }
  return response.json();
}

function write(path, body, options = {}) {
  return api(path, {
    method: "POST",
    headers: { "Content-Type": "application/json", "X-Beacon-Token": TOKEN },
    body: JSON.stringify(body),
    ...options,
  });
}

// ------------------------------------------------------------------ data
async function loadRows() {
  const data = await api("api/rows");
  state.rows = data.rows;
  state.choices = data.labels;
  state.file = data.file;
  state.defaultAnnotator = data.annotator;
  $("file").textContent = data.file;
  $("annotator").value = localStorage.getItem("beacon.annotator") || data.annotator;
  const stageFilter = $("f-stage");
  for (const label of data.labels) stageFilter.append(el("option", { value: label, text: label }));
  buildChoices();
}

async function loadLabels() {
  const data = await api(`api/labels?annotator=${encodeURIComponent(annotator())}`);
  state.labels = data.labels;
  $("export").href = `api/export?annotator=${encodeURIComponent(annotator())}`;
}

async function save(stage) {
  const row = state.current;
  if (!row) return;
  clearTimeout(noteTimer);
  const note = $("note").value;
  const body = { id: row.id, stage, note, annotator: annotator() };
  try {
    const data = await write("api/labels", body);
    state.labels[row.id] = data.saved;
    $("saved").className = "";
    $("saved").textContent = `Saved ${stage || "note"} · ${new Date().toLocaleTimeString()}`;
  } catch (err) {
    $("saved").className = "error";
    $("saved").textContent = `Not saved: ${err.message}`;
  }
  renderChoices();
  renderList();
}

function noteChanged() {
  clearTimeout(noteTimer);
  noteTimer = setTimeout(flushNote, 500);
}

async function flushNote() {
  clearTimeout(noteTimer);
  const row = state.current;
  if (!row) return;
  const saved = state.labels[row.id];
  if ((saved ? saved.note || "" : "") === $("note").value) return;
  await save(saved ? saved.stage : null);
}

function sendPendingNote() {
  // A tab closed within the note's debounce: a keepalive request outlives the page.
  const row = state.current;
  if (!row || noteTimer === null) return;
  clearTimeout(noteTimer);
  const saved = state.labels[row.id];
  if ((saved ? saved.note || "" : "") === $("note").value) return;
  const body = { id: row.id, stage: saved ? saved.stage : null, note: $("note").value, annotator: annotator() };
  write("api/labels", body, { keepalive: true }).catch(() => {}); // the page is gone: nowhere to say so
}

// --------------------------------------------------------------- filters
function visibleRows() {
  const group = $("f-group").value, status = $("f-status").value, stage = $("f-stage").value;
  return state.rows.filter((row) => {
    const label = state.labels[row.id];
    const has = Boolean(label && label.stage);
    if (group && row.group_type !== group) return false;
    if (status === "labelled" && !has) return false;
    if (status === "unlabelled" && has) return false;
    if (stage && !(has && label.stage === stage)) return false;
    return true;
  });
}

async function go(row) {
  if (state.current && row && row.id === state.current.id) return;
  await flushNote();
  state.current = row;
  state.revealed = false;
  if (row) history.replaceState(null, "", `#id=${encodeURIComponent(row.id)}`);
  render();
  $("sample").scrollTop = 0;
  window.scrollTo(0, 0);
}

function step(delta) {
  const rows = visibleRows();
  if (!rows.length) return;
  const i = rows.findIndex((r) => state.current && r.id === state.current.id);
  go(rows[Math.min(rows.length - 1, Math.max(0, i < 0 ? 0 : i + delta))]);
}

function nextUnlabelled() {
  const rows = state.rows;
  const start = Math.max(0, rows.findIndex((r) => state.current && r.id === state.current.id));
  for (let k = 1; k <= rows.length; k++) {
    const row = rows[(start + k) % rows.length];
    const label = state.labels[row.id];
    if (!(label && label.stage)) return go(row);
  }
  $("saved").textContent = "Every rollout has a label.";
}

// ---------------------------------------------------------------- render
function render() { renderList(); renderSample(); renderChoices(); renderCritic(); }

function renderList() {
  const rows = visibleRows();
  const done = state.rows.filter((r) => state.labels[r.id] && state.labels[r.id].stage).length;
  const total = state.rows.length;
  $("progress-text").textContent = `${done} / ${total} labelled`;
  $("progress-fill").style.width = `${total ? (100 * done) / total : 0}%`;
  $("f-count").textContent = `${rows.length} of ${total} shown`;
  const list = $("list");
  list.replaceChildren(...rows.map((row) => {
    const label = state.labels[row.id];
    const stage = label && label.stage;
    const tag = el("span", { class: stage ? "tag" : "tag none", text: stage || "—" });
    if (stage) tag.style.background = `var(--${stage})`;
    const item = el("li", { title: row.id, onclick: () => go(row) }, el("span", { text: row.id }), tag);
    if (state.current && row.id === state.current.id) item.className = "current";
    return item;
  }));
}

function imageBox(image) {
  if (!image.ok) return el("div", { class: "missing", text: `image missing: ${image.name}` });
  return el("a", { href: image.url, target: "_blank", title: "open full size" },
    el("img", { src: image.url, alt: image.name, loading: "lazy" }));
}

function field(name, value, cls = "v") {
  return el("div", { class: "field" }, el("div", { class: "k", text: name }), el("div", { class: cls, text: value }));
}

function splitCode(text) {
  // Generated text may hold a whole <code>```python ...```</code> block (Thyme format).
  const parts = [];
  const re = /<code>\s*(?:```[a-zA-Z]*\n?)?([\s\S]*?)(?:```\s*)?(?:<\/code>|$)/g;
  let last = 0, m;
  while ((m = re.exec(text)) !== null) {
    if (m.index > last) parts.push({ code: false, text: text.slice(last, m.index) });
    parts.push({ code: true, text: m[1] });
    last = re.lastIndex;
    if (m[0] === "") re.lastIndex++;
  }
  if (last < text.length) parts.push({ code: false, text: text.slice(last) });
  return parts;
}

function stripCode(text) {
  return text.replace(/^\s*(<code>)?\s*```[a-zA-Z]*\n?/, "").replace(/```\s*(<\/code>)?\s*$/, "");
}

function prose(text) {
  // Reasoning with <think> tags dropped and the <answer>...</answer> span highlighted.
  const clean = text.replace(/<\/?think>/g, "").trim();
  const parts = clean.split(/<answer>([\s\S]*?)<\/answer>/);
  return el("div", { class: "text" }, ...parts.map((part, i) => (i % 2
    ? el("span", { class: "answer", text: `Answer: ${part}` }) : part)));
}

function segment(seg) {
  if (seg.role === "prompt") {
    return el("details", { class: "prompt" },
      el("summary", { text: `Prompt the model saw (${seg.text.length} characters)` }),
      el("pre", { class: "out", text: seg.text }));
  }
  if (seg.role === "observation") {
    const text = seg.text.replace(/<\/?sandbox_output>/g, "").replace(/<image>/g, "").trim();
    return el("div", { class: "seg obs" }, el("div", { class: "who", text: "Sandbox output" }),
      text ? el("pre", { class: "out", text }) : null,
      seg.images.length ? el("div", { class: "images seg-images" }, ...seg.images.map(imageBox)) : null);
  }
  const body = seg.kind === "code"
    ? [el("pre", { class: "code", text: stripCode(seg.text) })]
    : splitCode(seg.text).map((p) => (p.code ? el("pre", { class: "code", text: p.text }) : prose(p.text)));
  return el("div", { class: "seg gen" },
    el("div", { class: "who", text: seg.kind === "code" ? "Model · code" : "Model" }), ...body);
}

function renderSample() {
  const main = $("sample");
  const row = state.current;
  if (!row) {
    main.replaceChildren(el("p", { class: "empty", text: "No rollout matches the filters." }));
    return;
  }
  const ids = el("div", { class: "ids" },
    el("span", {}, "rollout ", el("b", { text: row.id })),
    el("span", {}, "group ", el("b", { text: row.group_id })),
    el("span", {}, "rollout # ", el("b", { text: String(row.rollout_id) })),
    el("span", { class: `tag gt-${row.group_type}`, text: row.group_type.replace("_", "-") }),
    el("span", { text: `${row.tool_calls} tool call(s) · finish: ${row.finish_reason}` }));
  const verdict = row.correct ? "✓ correct" : "✗ wrong";
  const facts = el("div", {},
    field("Question", row.question),
    field("Reference answer", row.reference),
    field("Rollout's final answer", row.final_answer == null ? "(none)" : row.final_answer),
    field("Verdict", verdict, `v verdict ${row.correct ? "ok" : "bad"}`));
  const top = el("section", { class: "card" }, ids,
    el("div", { class: "top" }, el("div", { class: "images" }, ...row.images.map(imageBox)), facts));
  const rollout = el("section", { class: "card" }, el("h2", { text: "Rollout" }), ...row.segments.map(segment));
  main.replaceChildren(top, rollout);
  const label = state.labels[row.id];
  $("note").value = label ? label.note || "" : "";
  $("saved").textContent = "";
}

function buildChoices() {
  $("choices").replaceChildren(...state.choices.map((stage) => el("button", {
    type: "button", class: "choice", "data-stage": stage, onclick: () => save(stage),
  }, el("span", { class: "name" }, el("kbd", { text: KEY_OF[stage] }), stage),
  el("span", { class: "hint", text: STAGE_HELP[stage] || "" }))));
}

function renderChoices() {
  const label = state.current && state.labels[state.current.id];
  for (const button of $("choices").children) {
    const stage = button.dataset.stage;
    const chosen = Boolean(label && label.stage === stage);
    button.classList.toggle("chosen", chosen);
    button.setAttribute("aria-pressed", String(chosen));
    button.style.background = chosen ? `var(--${stage})` : "";
    button.style.borderColor = `var(--${stage})`;
  }
}

function renderCritic() {
  const row = state.current;
  const body = $("critic-body");
  $("reveal").textContent = "";
  $("reveal").append(state.revealed ? "Hide critic label " : "Show critic label ", el("kbd", { text: "R" }));
  $("reveal").setAttribute("aria-expanded", String(state.revealed));
  body.hidden = !state.revealed;
  if (!row) return;
  if (!row.critic) { body.replaceChildren(el("span", { class: "hint", text: "No critic label for this rollout." })); return; }
  const tag = el("span", { class: "tag", text: row.critic.stage });
  tag.style.background = `var(--${row.critic.stage})`;
  body.replaceChildren(el("div", {}, "Critic: ", tag),
    row.critic.discrepancy ? el("div", { class: "text", text: row.critic.discrepancy }) : null);
}

// ------------------------------------------------------------ import/export
async function importFile(event) {
  const file = event.target.files[0];
  event.target.value = "";
  if (!file) return;
  try {
    const data = await write("api/import", { text: await file.text(), annotator: annotator() });
    await loadLabels();
    render();
    banner(`Imported ${data.imported} label(s) from ${file.name}.`, "info");
  } catch (err) {
    banner(`Could not import ${file.name}:\n${err.message}`);
  }
}

// ------------------------------------------------------------ keyboard
function onKey(event) {
  const typing = ["TEXTAREA", "INPUT", "SELECT"].includes(document.activeElement.tagName);
  if (typing) {
    if (event.key === "Escape") { document.activeElement.blur(); flushNote(); }
    return;
  }
  if (event.ctrlKey || event.metaKey || event.altKey) return;
  const key = event.key.toLowerCase();
  const stage = Object.keys(KEY_OF).find((s) => KEY_OF[s] === key) || (key === "s" ? "SKIP" : null);
  if (stage) save(stage);
  else if (key === "j" || key === "arrowright") step(1);
  else if (key === "k" || key === "arrowleft") step(-1);
  else if (key === "u") nextUnlabelled();
  else if (key === "r") { state.revealed = !state.revealed; renderCritic(); }
  else if (key === "n") $("note").focus();
  else return;
  event.preventDefault();
}

async function main() {
  try {
    await loadRows();
    await loadLabels();
  } catch (err) {
    banner(`Could not load the annotation file: ${err.message}`);
    return;
  }
  const wanted = decodeURIComponent((location.hash.match(/id=(.*)$/) || [])[1] || "");
  state.current = state.rows.find((r) => r.id === wanted) || state.rows[0] || null;
  render();
  document.addEventListener("keydown", onKey);
  $("note").addEventListener("input", noteChanged);
  $("note").addEventListener("blur", flushNote);
  $("reveal").addEventListener("click", () => { state.revealed = !state.revealed; renderCritic(); });
  $("prev").addEventListener("click", () => step(-1));
  $("next").addEventListener("click", () => step(1));
  $("next-open").addEventListener("click", nextUnlabelled);
  $("import").addEventListener("change", importFile);
  $("annotator").addEventListener("change", async () => {
    localStorage.setItem("beacon.annotator", annotator());
    await loadLabels();
    render();
  });
  for (const id of ["f-group", "f-status", "f-stage"]) {
    $(id).addEventListener("change", () => {
      const rows = visibleRows();
      if (!rows.some((r) => state.current && r.id === state.current.id)) go(rows[0] || null);
      else renderList();
    });
  }
  window.addEventListener("pagehide", sendPendingNote);
}

main();
