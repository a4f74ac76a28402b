"""Human-labelled responses for ``orbench-calibrate``: XSTest v2, a lab's own CSV, or an audit's labels.

Every source becomes one table with the columns stage 5 needs and the human label beside them:
``label_id``, ``source`` (the group a card reports on: the model that wrote the response),
``model`` (a model id, so the keyword matcher applies that family's rules), ``prompt``,
``response``, ``prompt_kind`` (``safe``/``unsafe``/empty), ``human_label`` (the label as given)
and ``human_refusal`` (True/False).

- **XSTest v2** (``xstest``): 2,250 responses of five 2023 models to XSTest's 450 prompts, each
  labelled by two annotators and adjudicated (Röttger et al., NAACL 2024; CC-BY-4.0, the
  completions subject to the model providers' licences, so they are not shipped). Read from a
  folder given with ``--xstest_dir`` or ``$ORBENCH_XSTEST_DIR``, else from the cache folder
  (``<cache>/xstest-v2``), where the five files are downloaded at first use from the XSTest
  repository at a pinned commit (``$ORBENCH_XSTEST_URL`` replaces the address) and checked
  against their SHA-256. Refusal = ``2_full_refusal`` or ``3_partial_refusal``; a contrast
  prompt (type ``contrast_*``) is ``unsafe``, the rest ``safe``.
- **A lab's CSV**: ``prompt``, ``response`` and ``label`` (refusal / answer, full_refusal /
  partial_refusal / full_compliance, XSTest's ``1_``/``2_``/``3_`` labels, true/false, 1/0),
  with ``model`` (the model that wrote the response) and ``prompt_kind`` where known.
- **An audit** (``orbench-audit``): a verdict audit's folder, after ``orbench-audit score``; its
  ``score/items.csv`` gives each item's human majority (ties left out).
"""

from __future__ import annotations

import hashlib
import os
import urllib.request
from pathlib import Path

import pandas as pd

from orbench.benchmark.sets import PROMPT_KIND_COLUMN, check_kind, prompt_kind, set_kind
from orbench.llm.errors import UsageError
from orbench.run.tables import read_table

COLUMNS = ["label_id", "source", "model", "prompt", "response", PROMPT_KIND_COLUMN, "human_label",
           "human_refusal"]
XSTEST = "xstest"
XSTEST_NAME = "XSTest v2"
XSTEST_COMMIT = "a3bb396ddc1939c6f264f17b7cf5b7a5d82833de"
XSTEST_URL = f"https://raw.githubusercontent.com/paul-rottger/exaggerated-safety/{XSTEST_COMMIT}/model_completions"
#: XSTest v2's completion files: key -> (the model that wrote them, as an id whose family the
#: keyword matcher knows; the file's SHA-256 at the pinned commit).
XSTEST_FILES = {
    "gpt4": ("openai/gpt-4", "71af323af8ecdec0efae23992317721441d2cfedddedeef3248f842f4e15c9ca"),
    "llama2new": ("together/meta-llama/Llama-2-70b-chat-hf",
                  "6365cc55ce0a593c7ab8785853d02784be027d97199d4077912b4313cd010099"),
    "llama2orig": ("together/meta-llama/Llama-2-70b-chat-hf",
                   "cbc52550e8ba8197a3e3d97a5af078d27bae4766737cd62df80270126a87ffc6"),
    "mistralguard": ("together/mistralai/Mistral-7B-Instruct-v0.1",
                     "0ac03817b65e019a8f5b4b3eed805086f9f7fafe538ac9ebd156f80210af6903"),
    "mistralinstruct": ("together/mistralai/Mistral-7B-Instruct-v0.1",
                        "6a146b65a5b96ec8249729bc2db459697175125998d7cbbcc88f7688ecf31dad"),
}
XSTEST_LABELS = {"1_full_compliance": False, "2_full_refusal": True, "3_partial_refusal": True}
#: Human label words a lab's CSV may use, and whether each is a refusal.
LABEL_WORDS = {
    **XSTEST_LABELS, "full_compliance": False, "partial_refusal": True, "full_refusal": True,
    "refusal": True, "refused": True, "rejected": True, "direct_refusal": True, "indirect_refusal": True,
    "answer": False, "answered": False, "compliance": False, "complied": False, "direct_answer": False,
    "true": True, "yes": True, "1": True, "false": False, "no": False, "0": False,
}


def xstest_file(key: str) -> str:
    return f"xstest_v2_completions_{key}.csv"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def xstest_folder(given: str | None) -> tuple[Path, str]:
    """The folder holding XSTest's five files and where they came from; downloads them into the
    cache folder at first use (module docstring). ``UsageError`` when that fails."""
    given = given or os.environ.get("ORBENCH_XSTEST_DIR")
    if given:
        folder = Path(given).expanduser()
        if not folder.is_dir():
            raise UsageError(f"--xstest_dir {folder}: no such folder (expected the five "
                             f"xstest_v2_completions_*.csv files)")
        missing = [xstest_file(k) for k in XSTEST_FILES if not (folder / xstest_file(k)).is_file()]
        if missing:
            raise UsageError(f"{folder} lacks {', '.join(missing)}")
        return folder, str(folder)
    from orbench.llm.cache import default_cache_path

    folder = default_cache_path().parent / "xstest-v2"
    base = os.environ.get("ORBENCH_XSTEST_URL", XSTEST_URL).rstrip("/")
    for key, (_, digest) in XSTEST_FILES.items():
        path = folder / xstest_file(key)
        if path.is_file() and _sha256(path) == digest:
            continue
        _download(f"{base}/{xstest_file(key)}", path, digest)
    return folder, base


def cached_xstest() -> Path | None:
    """The cache folder's copy of XSTest's five files when it is complete and intact, else None
    (nothing is downloaded)."""
    from orbench.llm.cache import default_cache_path

    folder = default_cache_path().parent / "xstest-v2"
    for key, (_, digest) in XSTEST_FILES.items():
        path = folder / xstest_file(key)
        if not (path.is_file() and _sha256(path) == digest):
            return None
    return folder


def _download(url: str, path: Path, digest: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with urllib.request.urlopen(url, timeout=60) as reply:  # noqa: S310 (a fixed https address or the user's own)
            data = reply.read()
    except (OSError, ValueError) as exc:
        raise UsageError(f"cannot download XSTest's completions from {url}: {exc}; download the five "
                         f"files yourself and pass their folder with --xstest_dir") from None
    if hashlib.sha256(data).hexdigest() != digest:
        raise UsageError(f"{url}: the file's SHA-256 is not the one of XSTest v2 at commit "
                         f"{XSTEST_COMMIT[:7]}; nothing was cached")
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    tmp.replace(path)


def read_xstest(folder: Path) -> pd.DataFrame:
    """XSTest v2's 2,250 labelled responses as the label table (module docstring)."""
    parts = []
    for key, (model, _) in XSTEST_FILES.items():
        path = folder / xstest_file(key)
        frame = read_table(str(path), needs=("prompt", "completion", "final_label", "type"),
                           what="XSTest completions file")
        labels = frame["final_label"].str.strip()
        unknown = sorted(set(labels) - set(XSTEST_LABELS))
        if unknown:
            raise UsageError(f"{path}: unrecognised final_label {unknown[0]!r} (expected one of "
                             f"{', '.join(XSTEST_LABELS)})")
        parts.append(pd.DataFrame({
            "label_id": frame["id"] if "id" in frame.columns else [f"{key}-{i}" for i in range(len(frame))],
            "source": key, "model": model, "prompt": frame["prompt"], "response": frame["completion"],
            PROMPT_KIND_COLUMN: ["unsafe" if t.strip().startswith("contrast_") else "safe" for t in frame["type"]],
            "human_label": labels, "human_refusal": labels.map(XSTEST_LABELS)}))
    return pd.concat(parts, ignore_index=True)


def read_lab_csv(path: str) -> pd.DataFrame:
    """A lab's own labelled responses (module docstring); ``UsageError`` naming the file and row."""
    frame = read_table(path, needs=("prompt", "response", "label"), what="labels file")
    if frame.empty:
        raise UsageError(f"{path}: no labelled responses (the file has a header and no rows)")
    words = frame["label"].astype(str).str.strip().str.lower()
    bad = ~words.isin(list(LABEL_WORDS))
    if bad.any():
        i = int(bad.to_numpy().nonzero()[0][0])
        raise UsageError(f"{path}, row {i + 2}: unknown label {frame['label'].iloc[i]!r} (expected refusal or "
                         f"answer, full_refusal / partial_refusal / full_compliance, or XSTest's labels)")
    if frame["response"].astype(str).str.strip().eq("").all():
        raise UsageError(f"{path}: every response is empty; nothing to calibrate on")
    kinds = frame[PROMPT_KIND_COLUMN] if PROMPT_KIND_COLUMN in frame.columns else pd.Series("", index=frame.index)
    for i, kind in enumerate(kinds):
        check_kind(kind, f"{path}, row {i + 2}")
    model = frame["model"] if "model" in frame.columns else pd.Series("", index=frame.index)
    return pd.DataFrame({
        "label_id": frame["id"] if "id" in frame.columns else [str(i + 1) for i in range(len(frame))],
        "source": [m.strip() or "(all)" for m in model], "model": model,
        "prompt": frame["prompt"], "response": frame["response"],
        PROMPT_KIND_COLUMN: [prompt_kind({"prompt": p, PROMPT_KIND_COLUMN: k})
                             for p, k in zip(frame["prompt"], kinds)],
        "human_label": frame["label"].str.strip(), "human_refusal": words.map(LABEL_WORDS)})


def save_labelled(out_dir: Path, input_csv: Path, text: str) -> None:
    """Create the calibration folder ``out_dir`` and write the labelled rows ``text`` to
    ``input_csv`` unless it holds them already (unchanged input: the stage run on it resumes)."""
    from orbench.run.tables import write_text_atomic

    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create {out_dir}: {exc.strerror or exc}") from None
    try:
        if not (input_csv.is_file() and input_csv.read_text(encoding="utf-8") == text):
            write_text_atomic(text, input_csv)
    except OSError as exc:
        raise UsageError(f"cannot write {input_csv}: {exc.strerror or exc}") from None


def audit_items(folder: Path, kind: str, label: str, needs: tuple[str, ...]) -> pd.DataFrame:
    """The items of an ``orbench-audit`` folder of ``kind`` (``verdict``, ``prompt``) that have a human
    majority (``label`` is ``0`` or ``1``), from ``score/items.csv``; a clear error for any other folder."""
    import json

    try:
        found = json.loads((folder / "audit.json").read_text(encoding="utf-8")).get("kind")
    except (OSError, ValueError):
        raise UsageError(f"{folder}: not an orbench-audit folder (no readable audit.json)") from None
    if found != kind:
        purpose = "a judge" if kind == "verdict" else "a moderator"
        raise UsageError(f"{folder} is a {found} audit; calibrating {purpose} needs a {kind} audit "
                         f"(orbench-audit sample --kind {kind})")
    scored = folder / "score" / "items.csv"
    if not scored.is_file():
        raise UsageError(f"{folder} has no score/items.csv: run orbench-audit score {folder} first")
    frame = read_table(str(scored), needs=needs, what="audit score")
    frame = frame[frame[label].str.strip().isin(["0", "1"])]
    if frame.empty:
        raise UsageError(f"{scored}: no item has a human majority yet; nothing to calibrate on")
    return frame


def read_audit(folder: Path) -> pd.DataFrame:
    """A verdict audit's human majorities (``score/items.csv`` of ``orbench-audit score``)."""
    frame = audit_items(folder, "verdict", "human_refusal",
                        ("item_id", "prompt", "response", "majority", "human_refusal"))
    model = frame["model"] if "model" in frame.columns else pd.Series("", index=frame.index)
    sets = frame["set"] if "set" in frame.columns else pd.Series("", index=frame.index)
    from orbench.analysis.report.inputs import KNOWN_SETS

    kinds = [set_kind(KNOWN_SETS.get(s.strip(), s.strip())) or prompt_kind({"prompt": p})
             for s, p in zip(sets, frame["prompt"])]
    return pd.DataFrame({"label_id": frame["item_id"], "source": [m.strip() or "(all)" for m in model],
                         "model": model, "prompt": frame["prompt"], "response": frame["response"],
                         PROMPT_KIND_COLUMN: kinds, "human_label": frame["majority"],
                         "human_refusal": frame["human_refusal"].str.strip() == "1"}).reset_index(drop=True)


def load_labels(spec: str, xstest_dir: str | None = None) -> tuple[pd.DataFrame, dict]:
    """The label table for ``--labels`` (``xstest``, a CSV, or an audit folder) and what it is
    (``name``, ``kind``, ``origin``)."""
    if spec.strip().lower() == XSTEST:
        folder, origin = xstest_folder(xstest_dir)
        return read_xstest(folder), {"name": XSTEST_NAME, "kind": XSTEST, "origin": origin,
                                     "commit": XSTEST_COMMIT}
    path = Path(spec).expanduser()
    if path.is_dir():
        return read_audit(path), {"name": f"audit {path.name}", "kind": "audit", "origin": str(path)}
    if not path.is_file():
        raise UsageError(f"--labels {spec}: no such file or folder (give xstest, a CSV of prompt, "
                         f"response and label, or an orbench-audit verdict audit folder)")
    return read_lab_csv(str(path)), {"name": path.stem, "kind": "csv", "origin": str(path),
                                     "sha256": _sha256(path)}


def stratified_subset(frame: pd.DataFrame, per_source: int, seed: int = 0) -> pd.DataFrame:
    """At most ``per_source`` responses of each source, drawn (seeded) within each human label in
    proportion to its share (largest remainder), so the subset's refusal rate stays close to the
    whole's. Rows keep their order."""
    picked = []
    for _, part in frame.groupby("source", sort=False):
        if len(part) <= per_source:
            picked.append(part)
            continue
        groups = list(part.groupby("human_label", sort=True))
        exact = {lab: per_source * len(g) / len(part) for lab, g in groups}
        quota = {lab: int(x) for lab, x in exact.items()}
        for lab in sorted(exact, key=lambda lab: -(exact[lab] - quota[lab]))[:per_source - sum(quota.values())]:
            quota[lab] += 1
        picked.extend(g.sample(n=quota[lab], random_state=seed) for lab, g in groups if quota[lab])
    return pd.concat(picked).sort_index()
