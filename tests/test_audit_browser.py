"""audit.html in headless Chromium: label with the keyboard, reload, export, score; hostile text stays text.

Uses Debian's ``chromium`` and ``chromium-driver`` through Selenium (``pip install -e '.[browser]'``);
skipped, saying why, only where they are not installed. The suite's one browser (``browser`` in
``tests/conftest.py``) serves every test here.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from orbench.analysis.audit import commands as audit  # noqa: E402 (needs the sys.path set-up above)

HOSTILE = ['<script>window.__pwned=1;alert(1)</script>', '<img src=x onerror="window.__pwned=2;alert(2)">',
           'ends the field </textarea><b id=injected>bold</b>', 'a </script><script>window.__pwned=3</script> b']


@pytest.fixture
def verdict_audit(tmp_path):
    src = tmp_path / "hard_model.csv"
    responses = HOSTILE + ["Sure, here is how.", "I cannot help with that.", "Here are the steps, but I will not."]
    pd.DataFrame({"prompt": [f"prompt {i} <i>{i}</i>" for i in range(len(responses))], "category": "hate",
                  "model": "m", "response": responses,
                  "is_rejected": ["False"] * 4 + ["False", "True", "True"],
                  "refusal_kind": [""] * 5 + ["full", "partial"]}).to_csv(src, index=False)
    folder = tmp_path / "audit"
    assert audit.main(["sample", "--kind", "verdict", str(src), "--output_dir", str(folder)]) == 0
    return folder


def keys(browser, *keys):
    from selenium.webdriver.common.action_chains import ActionChains

    chain = ActionChains(browser)
    for k in keys:
        chain.send_keys(k)
    chain.perform()


def open_page(browser, folder: Path, name: str | None):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    browser.get((folder / "audit.html").as_uri())
    if name:
        field = browser.find_element(By.ID, "whoname")
        field.send_keys(name, Keys.ENTER)


def text(browser, element_id: str) -> str:
    return browser.execute_script(f"return document.getElementById({element_id!r}).textContent")


def label_items(browser, folder: Path, name: str, labels: list[str]) -> str:
    """As annotator ``name`` (switched to on the open page), label the items from the first with
    keys 1/2/3; return the CSV the page exports."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    sample = audit.read_sample(folder)
    browser.get((folder / "audit.html").as_uri())
    browser.find_element(By.ID, "switch").click()
    browser.find_element(By.ID, "whoname").send_keys(name, Keys.ENTER)
    keys(browser, *[str(sample.labels.index(lab) + 1) for lab in labels])
    keys(browser, Keys.ARROW_LEFT)
    return browser.execute_script("return window.auditCSV()")


def export_download(browser, downloads, name):
    """Click the page's export button and wait for the real download (Blob + <a download>) to land."""
    from selenium.webdriver.common.by import By

    downloads.mkdir()
    browser.execute_cdp_cmd("Page.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(downloads)})
    browser.find_element(By.ID, "export").click()
    target = downloads / name
    for _ in range(100):  # a generous bound: the file appears in well under a second
        if target.exists() and target.stat().st_size:
            break
        time.sleep(0.1)
    return target


def test_label_reload_export_and_score(browser, verdict_audit, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    folder = verdict_audit
    sample = audit.read_sample(folder)
    n = len(sample.items)
    browser.get((folder / "audit.html").as_uri())
    browser.execute_script("localStorage.clear()")
    open_page(browser, folder, "alice")
    assert not browser.find_element(By.ID, "who").is_displayed()
    assert text(browser, "count") == f"0 of {n} labelled"
    assert text(browser, "prompt") == sample.items["prompt"].iat[0]
    # 1, 3, 2 label the first three items and move on; left arrow goes back; n focuses the note
    keys(browser, "1", "3", "2", Keys.ARROW_LEFT)
    assert text(browser, "count") == f"3 of {n} labelled"
    assert text(browser, "pos").startswith(f"3 / {n}")
    on = browser.find_elements(By.CSS_SELECTOR, "#labels button.on")
    assert [b.get_attribute("data-label") for b in on] == ["partial_refusal"]
    keys(browser, "n", "unclear, \"quoted\"", Keys.ESCAPE, Keys.ARROW_RIGHT, Keys.ARROW_LEFT)
    assert browser.find_element(By.ID, "note").get_attribute("value") == "unclear, \"quoted\""
    width = browser.execute_script("return document.getElementById('progress').style.width")
    assert float(width.rstrip("%")) == pytest.approx(300 / n)
    # a reload (or a closed tab) keeps the name, the labels, the note and the place
    browser.refresh()
    assert not browser.find_element(By.ID, "who").is_displayed()
    assert text(browser, "annotator") == "annotator: alice"
    assert text(browser, "count") == f"3 of {n} labelled"
    assert browser.find_element(By.ID, "note").get_attribute("value") == "unclear, \"quoted\""
    ids = sample.items["item_id"].tolist()
    # label the rest and export through the real download (Blob + <a download>)
    keys(browser, Keys.ARROW_RIGHT, *["1"] * (n - 3))
    assert text(browser, "count") == f"{n} of {n} labelled"
    shown = browser.execute_script("return window.auditCSV()")
    target = export_download(browser, tmp_path / "downloads", "labels_alice.csv")
    assert target.read_text(encoding="utf-8").replace("\r\n", "\n") == shown.replace("\r\n", "\n")
    got = pd.read_csv(target, dtype=str, keep_default_na=False)
    assert list(got.columns) == ["sample_id", "item_id", "annotator", "label", "note"]
    assert list(got["item_id"]) == ids and set(got["sample_id"]) == {sample.sample_id}
    assert list(got["label"]) == ["full_compliance", "full_refusal", "partial_refusal"] + ["full_compliance"] * (n - 3)
    assert got["note"].iat[2] == "unclear, \"quoted\""
    # a second annotator in the same browser ("switch annotator"), then score both files
    bob = label_items(browser, folder, "bob", ["full_compliance", "full_refusal"] + ["full_compliance"] * (n - 2))
    assert text(browser, "annotator") == "annotator: bob"
    # switching back to alice finds her labels untouched
    browser.find_element(By.ID, "switch").click()
    browser.find_element(By.ID, "whoname").send_keys("alice", Keys.ENTER)
    assert browser.execute_script("return window.auditCSV()") == shown
    (folder / "labels_bob.csv").write_text(bob, encoding="utf-8")
    shutil.copy(target, folder / "labels_alice.csv")
    assert audit.main(["score", str(folder)]) == 0
    res = json.loads((folder / "score" / "score.json").read_text())
    assert res["annotators"] == ["alice", "bob"] and res["labelled"] == {"alice": n, "bob": n}
    assert res["agreement"]["raw"] == pytest.approx((n - 1) / n)


def test_hostile_text_is_shown_as_text(browser, verdict_audit):
    from selenium.common.exceptions import NoAlertPresentException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    folder = verdict_audit
    sample = audit.read_sample(folder)
    browser.get((folder / "audit.html").as_uri())
    browser.execute_script("localStorage.clear()")
    open_page(browser, folder, "<img src=x onerror=alert(9)>")
    seen = []
    for _ in range(len(sample.items)):
        seen.append(text(browser, "response"))
        keys(browser, Keys.ARROW_RIGHT)
    assert sorted(seen) == sorted(sample.items["response"])  # every hostile text shown, character for character
    assert text(browser, "annotator") == "annotator: <img src=x onerror=alert(9)>"
    with pytest.raises(NoAlertPresentException):
        _ = browser.switch_to.alert.text
    assert browser.execute_script("return window.__pwned === undefined")
    assert browser.find_elements(By.CSS_SELECTOR, "main img, #injected, main b, main i") == []
    assert len(browser.find_elements(By.TAG_NAME, "script")) == 2
    assert len(browser.find_elements(By.TAG_NAME, "textarea")) == 1
    assert browser.execute_script("return window.auditFileName()") == "labels__img_src_x_onerror_alert_9_.csv"


def test_a_cut_off_reply_is_said_to_be_cut_off(browser, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    src = tmp_path / "hard_model.csv"
    pd.DataFrame({"prompt": [f"prompt {i}" for i in range(4)], "category": "hate", "model": "m",
                  "response": ["Sure, here is the start of", "I cannot help.", "Here you go.", "No."],
                  "is_rejected": ["False", "True", "False", "True"],
                  "finish_reason": ["length", "stop", "stop", "stop"]}).to_csv(src, index=False)
    folder = tmp_path / "audit"
    assert audit.main(["sample", "--kind", "verdict", str(src), "--output_dir", str(folder)]) == 0
    browser.get((folder / "audit.html").as_uri())
    browser.execute_script("localStorage.clear()")
    open_page(browser, folder, "carol")
    shown = {}
    for _ in range(4):
        shown[text(browser, "prompt")] = browser.find_element(By.ID, "cutoff").is_displayed()
        keys(browser, Keys.ARROW_RIGHT)
    assert shown == {"prompt 0": True, "prompt 1": False, "prompt 2": False, "prompt 3": False}
    assert text(browser, "cutoff").startswith("Cut off: this reply stopped at the model's token limit")
