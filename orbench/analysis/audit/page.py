"""The labelling page (``audit.html``) and the Label Studio import files of an audit sample.

The page is one self-contained file (inline CSS and script, no network, opens from ``file://``).
The sample travels as JSON inside ``<script type="application/json">`` with ``<``, ``>``, ``&``
and the two JavaScript line separators written as ``\\u`` escapes, so no text of a prompt or a
response (``</script>``, ``<img onerror=...>``) can end the element; the script puts every text
on the page with ``textContent``, never as markup.

A Content-Security-Policy allows only that one script (by its hash) and no network at all.

The page asks the annotator's name once (annotators sharing a browser switch names; each keeps
their own labels), shows one item at a time, labels with the keys 1/2/3
(then moves on), moves with the arrow keys, keeps a note per item, shows progress, keeps every
label in ``localStorage`` (per sample id, so a reload or a closed tab loses nothing) and exports
``labels_<name>.csv`` (``sample_id, item_id, annotator, label, note``) as a download.
``window.auditCSV()`` returns the text the export button downloads.
"""

from __future__ import annotations

import base64
import hashlib
import json
from xml.sax.saxutils import quoteattr

from orbench.analysis.html_kit import script_json

PAGE = r"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width,initial-scale=1">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; script-src __SCRIPT_HASH__">
<title>OR-Bench audit</title>
<style>
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;background:#f4f5f8;color:#1d2330}
main{max-width:900px;margin:0 auto;padding:18px 22px 40px}
header{display:flex;gap:14px;align-items:center;flex-wrap:wrap}
h1{font-size:1.25em;margin:0;flex:1}
.bar{height:10px;background:#dde1ea;border-radius:5px;overflow:hidden;margin:10px 0 4px}
.bar>div{height:100%;background:#3b6fe0;width:0;transition:width .2s}
.muted{color:#667085;font-size:.9em}
.card{background:#fff;border:1px solid #d9dde5;border-radius:8px;padding:14px 18px;margin:12px 0}
.card h2{font-size:.8em;text-transform:uppercase;letter-spacing:.06em;color:#667085;margin:0 0 6px}
.text{white-space:pre-wrap;word-break:break-word;line-height:1.45;max-height:46vh;overflow:auto}
.labels{display:flex;gap:10px;flex-wrap:wrap;margin:12px 0}
.labels button{flex:1;min-width:160px;padding:10px;border:2px solid #c9cfdb;border-radius:8px;background:#fff;
 cursor:pointer;font-size:1em;text-align:left}
.labels button small{display:block;color:#667085;font-size:.78em;margin-top:3px}
.labels button.on{border-color:#3b6fe0;background:#eaf0ff;font-weight:600}
textarea{width:100%;box-sizing:border-box;min-height:48px;font:inherit;padding:6px;border:1px solid #c9cfdb;border-radius:6px}
nav{display:flex;gap:8px;align-items:center;margin-top:10px}
nav button,#export,#switch{white-space:nowrap;padding:6px 12px;border-radius:6px;border:1px solid #c9cfdb;background:#fff;cursor:pointer}
#export{background:#3b6fe0;color:#fff;border-color:#3b6fe0}
#who{position:fixed;inset:0;background:rgba(20,25,35,.55);display:flex;align-items:center;justify-content:center}
#who form{background:#fff;padding:22px;border-radius:10px;min-width:300px}
#who input{font-size:1.1em;padding:6px;width:100%;box-sizing:border-box;margin:8px 0}
.cutoff{background:#fffaeb;border:1px solid #fec84b;border-radius:6px;padding:6px 10px;margin:0 0 8px;color:#7a2e0e}
kbd{border:1px solid #c9cfdb;border-bottom-width:2px;border-radius:4px;padding:0 4px;font-size:.85em;background:#f7f8fa}
.hidden{display:none!important}
</style></head>
<body>
<div id="who"><form id="whoform"><b>Your name</b>
<div class="muted">Asked once; your labels are saved in this browser under it (several annotators
can share a browser: "switch annotator" keeps each one's labels apart).</div>
<input id="whoname" autocomplete="off" required maxlength="60" placeholder="e.g. alice">
<button type="submit">Start</button></form></div>
<main>
<header><h1>OR-Bench audit</h1><span id="annotator" class="muted"></span>
<button id="switch" type="button">switch annotator</button>
<button id="export" type="button">Export my labels (CSV)</button></header>
<div class="bar"><div id="progress"></div></div>
<div class="muted"><span id="count"></span> &middot; item <span id="pos"></span> &middot; <span id="question"></span></div>
<div class="card"><h2>Prompt</h2><div id="prompt" class="text"></div></div>
<div class="card" id="responsecard"><h2>Response</h2>
<div id="cutoff" class="cutoff hidden">Cut off: this reply stopped at the model's token limit (finish_reason
length), so it ends where the model was stopped, not where it finished.</div>
<div id="response" class="text"></div></div>
<div class="labels" id="labels"></div>
<textarea id="note" placeholder="Note (optional): why, or what is unclear"></textarea>
<nav><button id="prev" type="button">&larr; previous</button><button id="next" type="button">next &rarr;</button>
<button id="nextopen" type="button">next unlabelled</button>
<span class="muted">Keys: <kbd>1</kbd>/<kbd>2</kbd>/<kbd>3</kbd> label and move on, <kbd>&larr;</kbd>/<kbd>&rarr;</kbd> move,
<kbd>n</kbd> note. Labels stay in this browser until you export them.</span></nav>
<p id="done" class="muted"></p>
</main>
<script type="application/json" id="data">__DATA__</script>
<script>
(function () {
  "use strict";
  var D = JSON.parse(document.getElementById("data").textContent);
  // who is labelling (per sample), and each annotator's labels under their own key
  var WHO = "orbench-audit:" + D.sample_id + ":annotator";
  var KEY = "";
  var state = {labels: {}};
  var pos = 0;
  var $ = function (id) { return document.getElementById(id); };

  function load(name) {
    KEY = "orbench-audit:" + D.sample_id + ":labels:" + name;
    var s = null;
    try { s = JSON.parse(localStorage.getItem(KEY) || "null"); } catch (e) {}
    state = (s && typeof s === "object") ? s : {};
    state.labels = state.labels || {};
    state.annotator = name;
    pos = Math.max(0, Math.min(state.pos || 0, D.items.length - 1));
  }
  function save() { if (!KEY) return; state.pos = pos; localStorage.setItem(KEY, JSON.stringify(state)); }
  function entry(id) { return state.labels[id] || (state.labels[id] = {label: "", note: ""}); }
  function done() { var n = 0; D.items.forEach(function (it) { var e = state.labels[it.item_id]; if (e && e.label) n++; }); return n; }

  function buildButtons() {
    D.labels.forEach(function (lab, i) {
      var b = document.createElement("button");
      b.type = "button"; b.dataset.label = lab;
      var t = document.createElement("span"); t.textContent = (i + 1) + "  " + lab.replace(/_/g, " ");
      var h = document.createElement("small"); h.textContent = D.help[lab] || "";
      b.appendChild(t); b.appendChild(h);
      b.addEventListener("click", function () { label(lab); });
      $("labels").appendChild(b);
    });
  }
  function show() {
    var it = D.items[pos], e = state.labels[it.item_id] || {label: "", note: ""};
    $("prompt").textContent = it.prompt;
    $("response").textContent = it.response || "";
    $("cutoff").classList.toggle("hidden", !it.cut_off);
    $("responsecard").classList.toggle("hidden", D.kind !== "verdict");
    $("note").value = e.note || "";
    Array.prototype.forEach.call($("labels").children, function (b) { b.classList.toggle("on", b.dataset.label === e.label); });
    var n = done();
    $("progress").style.width = (100 * n / D.items.length) + "%";
    $("count").textContent = n + " of " + D.items.length + " labelled";
    $("pos").textContent = (pos + 1) + " / " + D.items.length + " (" + it.item_id + ")";
    $("done").textContent = n === D.items.length ? "All items labelled: export your labels and send the file." : "";
  }
  function move(step) { keepNote(); pos = Math.max(0, Math.min(D.items.length - 1, pos + step)); save(); show(); }
  function keepNote() { var it = D.items[pos]; var v = $("note").value; if (v || state.labels[it.item_id]) { entry(it.item_id).note = v; } }
  function label(lab) {
    keepNote(); entry(D.items[pos].item_id).label = lab; save();
    if (pos < D.items.length - 1) { pos++; save(); }
    show();
  }
  function csvCell(v) { v = String(v == null ? "" : v); return /[",\r\n]/.test(v) ? '"' + v.replace(/"/g, '""') + '"' : v; }
  function csv() {
    keepNote();
    var rows = [["sample_id", "item_id", "annotator", "label", "note"]];
    D.items.forEach(function (it) {
      var e = state.labels[it.item_id];
      if (e && (e.label || e.note)) rows.push([D.sample_id, it.item_id, state.annotator, e.label || "", e.note || ""]);
    });
    return rows.map(function (r) { return r.map(csvCell).join(","); }).join("\r\n") + "\r\n";
  }
  function fileName() { return "labels_" + (state.annotator || "anonymous").replace(/[^A-Za-z0-9._-]+/g, "_") + ".csv"; }
  function exportCSV() {
    var blob = new Blob([csv()], {type: "text/csv;charset=utf-8"});
    var a = document.createElement("a");
    a.href = URL.createObjectURL(blob); a.download = fileName();
    document.body.appendChild(a); a.click();
    setTimeout(function () { URL.revokeObjectURL(a.href); a.remove(); }, 1000);
  }
  window.auditCSV = csv;
  window.auditFileName = fileName;

  function start() {
    $("who").classList.add("hidden");
    if (document.activeElement && document.activeElement.blur) document.activeElement.blur();  // keys label at once
    $("annotator").textContent = "annotator: " + state.annotator;
    $("question").textContent = D.question;
    show();
  }
  $("whoform").addEventListener("submit", function (ev) {
    ev.preventDefault();
    var name = $("whoname").value.trim();
    if (!name) return;
    localStorage.setItem(WHO, name); load(name); save(); start();
  });
  $("switch").addEventListener("click", function () {
    keepNote(); save(); $("whoname").value = ""; $("who").classList.remove("hidden"); $("whoname").focus();
  });
  $("note").addEventListener("input", function () { keepNote(); save(); });
  $("prev").addEventListener("click", function () { move(-1); });
  $("next").addEventListener("click", function () { move(1); });
  $("nextopen").addEventListener("click", function () {
    keepNote();
    for (var i = 1; i <= D.items.length; i++) {
      var j = (pos + i) % D.items.length, e = state.labels[D.items[j].item_id];
      if (!e || !e.label) { pos = j; break; }
    }
    save(); show();
  });
  $("export").addEventListener("click", exportCSV);
  document.addEventListener("keydown", function (ev) {
    if (!$("who").classList.contains("hidden") || ev.ctrlKey || ev.metaKey || ev.altKey) return;
    var t = ev.target && ev.target.tagName;
    if (t === "TEXTAREA" || t === "INPUT") { if (ev.key === "Escape") ev.target.blur(); return; }
    var k = parseInt(ev.key, 10);
    if (k >= 1 && k <= D.labels.length) { ev.preventDefault(); label(D.labels[k - 1]); }
    else if (ev.key === "ArrowRight") { ev.preventDefault(); move(1); }
    else if (ev.key === "ArrowLeft") { ev.preventDefault(); move(-1); }
    else if (ev.key === "n") { ev.preventDefault(); $("note").focus(); }
  });
  buildButtons();
  var known = localStorage.getItem(WHO);
  if (known) { load(known); start(); } else $("whoname").focus();
})();
</script>
</body></html>
"""

#: Said beside a reply that stopped at the token limit (Label Studio's header; the page has its own).
CUT_OFF_NOTE = "Cut off: this reply stopped at the model's token limit (finish_reason length)."


def _script_hash(page: str) -> str:
    """The CSP source of the page's one script (its SHA-256): inline handlers and injected scripts never run."""
    body = page.split("<script>", 1)[1].split("</script>", 1)[0]
    return "'sha256-" + base64.b64encode(hashlib.sha256(body.encode("utf-8")).digest()).decode("ascii") + "'"


PAGE = PAGE.replace("__SCRIPT_HASH__", _script_hash(PAGE))

def page_data(sample) -> dict:
    """What the page embeds: the sample id, kind, labels with their help, and the items (blind;
    ``cut_off``: the reply stopped at the token limit, shown as a notice above it)."""
    verdict = sample.kind == "verdict"
    items = [{"item_id": r.item_id, "prompt": r.prompt, "response": r.response if verdict else "",
              **({"cut_off": str(getattr(r, "cut_off", "")).strip() == "True"} if verdict else {})}
             for r in sample.items.fillna("").itertuples(index=False)]
    return {"sample_id": sample.sample_id, "kind": sample.kind, "labels": list(sample.labels),
            "help": sample.manifest.get("label_help", {}), "question": sample.manifest.get("question", ""),
            "items": items}


def render(sample) -> str:
    """The whole ``audit.html`` for a sample."""
    return PAGE.replace("__DATA__", script_json(page_data(sample)))


def label_studio(sample) -> tuple[str, str]:
    """Label Studio's import file (tasks JSON) and labelling config (XML) for a sample."""
    tasks = [{"data": {"item_id": it["item_id"], "sample_id": sample.sample_id, "prompt": it["prompt"],
                       **({"response": it["response"], "cut_off": CUT_OFF_NOTE if it.get("cut_off") else ""}
                          if sample.kind == "verdict" else {})}}
             for it in page_data(sample)["items"]]
    target = "response" if sample.kind == "verdict" else "prompt"
    parts = ["<View>", f"  <Header value={quoteattr(sample.manifest.get('question', ''))}/>",
             '  <Text name="prompt" value="$prompt"/>']
    if sample.kind == "verdict":
        parts += ['  <Header value="$cut_off" size="6"/>', '  <Text name="response" value="$response"/>']
    parts.append(f'  <Choices name="label" toName="{target}" choice="single" showInLine="true" required="true">')
    for i, lab in enumerate(sample.labels):
        parts.append(f"    <Choice value={quoteattr(lab)} hotkey=\"{i + 1}\"/>")
    parts += ["  </Choices>",
              f'  <TextArea name="note" toName="{target}" placeholder="Note (optional)" maxSubmissions="1"/>',
              "</View>"]
    return json.dumps(tasks, ensure_ascii=False, indent=1) + "\n", "\n".join(parts) + "\n"
