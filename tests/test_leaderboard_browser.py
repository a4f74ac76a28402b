"""The leaderboard site in a real headless Chromium: it draws, sorts, filters, hovers and selects, from disk,
with nothing in the console.

The site is built once for the module from the real reports of ``tests/leaderboard_runs.py`` and the
inspect log converted by EEE's converter; the suite's one browser (``browser`` in conftest) opens it
by its ``file://`` address.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import ROOT
from leaderboard_runs import HOSTILE, make

from orbench.analysis.leaderboard.build import build

ALPHA_BRIEF, ALPHA_NONE = "mock/gpt-4o-alpha (system prompt: Be brief.)", "mock/gpt-4o-alpha (system prompt: none)"


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    runs = make()
    out = tmp_path_factory.mktemp("leaderboard_site") / "site"
    page, _ = build([str(runs.rep1), str(runs.rep2), str(ROOT / "tests" / "data" / "eee_inspect")], out)
    data = json.loads((out / "data.json").read_text())
    return {"page": page, "data": data, "ids": {e["name"]: e["id"] for e in data["entries"]}, "out": out}


def open_page(browser, site):
    browser.get_log("browser")  # what earlier pages logged is not this page's
    browser.get(Path(site["page"]).as_uri())
    assert browser.execute_script("return document.body.getAttribute('data-ready')") == "1"


def console(browser) -> list:
    return [entry for entry in browser.get_log("browser") if entry["level"] in ("SEVERE", "WARNING")]


def rows(browser) -> list[dict]:
    return browser.execute_script("""
        return Array.from(document.querySelectorAll('#board tbody tr')).map(function (tr) {
          return {id: tr.getAttribute('data-id') || '', set: tr.getAttribute('data-set'),
                  category: tr.getAttribute('data-category'), name: tr.cells[1].textContent,
                  rate: tr.cells[6].textContent, sel: tr.classList.contains('sel')};
        });""")


def choose(browser, element_id: str, value: str) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    Select(browser.find_element(By.ID, element_id)).select_by_value(value)


def rate_of(text: str) -> float | None:
    return None if text.startswith("no rate") else float(text.split(" ")[0])


def test_the_page_draws_every_entry_the_papers_models_and_the_bounds_with_a_clean_console(browser, site):
    from selenium.webdriver.common.by import By

    open_page(browser, site)
    summary = browser.find_element(By.ID, "summary").text
    assert summary.startswith("6 entries (5 from orbench reports, 1 from other tools' records), and the 32 models")
    points = browser.find_elements(By.CSS_SELECTOR, "#plot g.point")
    assert sorted(p.get_attribute("data-id") for p in points) == sorted(site["ids"].values())
    # mistral-gamma has no toxic rate (9 of 10 rows without a verdict): its bounds, a hatched bar
    bars = browser.find_elements(By.CSS_SELECTOR, "#plot g.point rect.bar")
    assert [b.find_element(By.XPATH, "..").get_attribute("data-id") for b in bars] == [site["ids"]["mock/mistral-gamma"]]
    assert len(browser.find_elements(By.CSS_SELECTOR, "#plot circle.pub")) == 32
    cells = sum(len(e["cells"]) for e in site["data"]["entries"])
    assert len(rows(browser)) == cells + 64 and browser.find_element(By.ID, "count").text == f"{cells + 64} rows"
    assert console(browser) == []


def test_a_click_on_a_column_sorts_by_it_both_ways(browser, site):
    from selenium.webdriver.common.by import By

    open_page(browser, site)
    choose(browser, "f-set", "hard")
    header = browser.find_element(By.CSS_SELECTOR, "th[data-key=rate]")
    header.click()
    got = [rate_of(r["rate"]) for r in rows(browser)]
    assert len(got) == 6 + 32 and got == sorted(got)
    assert "asc" in header.get_attribute("class")
    header.click()
    got = [rate_of(r["rate"]) for r in rows(browser)]
    assert got == sorted(got, reverse=True) and "desc" in header.get_attribute("class")
    browser.find_element(By.CSS_SELECTOR, "th[data-key=name]").click()
    names = [r["name"] for r in rows(browser)]
    assert names == sorted(names)
    # the default order is the rank, one group of like prompts after another: the full set first (the paper's
    # models, the lowest rate first), then the entries on the sample of 12 prompts (gamma's 2 of 12 first)
    open_page(browser, site)
    choose(browser, "f-set", "hard")
    got = rows(browser)
    assert [r["id"] for r in got[:32]] == [""] * 32 and got[0]["name"] == "Llama-3.1-70B"
    assert got[32]["name"] == "mock/mistral-gamma"
    ranks = browser.execute_script("return Array.from(document.querySelectorAll('#board tbody tr')).map("
                                   "function (tr) { return tr.cells[0].textContent; });")
    assert ranks[:32] == [str(i) for i in range(1, 33)] and ranks[32].startswith("1 in sample ")
    assert console(browser) == []


def test_filters_by_set_category_provider_judge_source_and_name(browser, site):
    from selenium.webdriver.common.by import By

    entries = site["data"]["entries"]
    open_page(browser, site)
    choose(browser, "f-set", "toxic")
    got = rows(browser)
    assert {r["set"] for r in got} == {"toxic"} and len(got) == 6 + 32
    # a category: only the entries that have it, only that category, no published rows
    choose(browser, "f-set", "hard")
    category = sorted(next(e for e in entries if e["name"] == ALPHA_BRIEF)["cells"]["hard"]["categories"])[0]
    choose(browser, "f-category", category)
    got = rows(browser)
    assert sorted(r["id"] for r in got) == sorted(e["id"] for e in entries if category in
                                                   (e["cells"].get("hard") or {}).get("categories", {}))
    assert {r["category"] for r in got} == {category} and all(r["id"] for r in got)
    # XSTest's categories are its own types
    choose(browser, "f-set", "xstest-safe")
    options = [o.get_attribute("value") for o in browser.find_elements(By.CSS_SELECTOR, "#f-category option")]
    xs = next(s for s in site["data"]["sets"] if s["key"] == "xstest-safe")["categories"]
    assert options == [""] + xs and "privacy" not in options
    open_page(browser, site)
    choose(browser, "f-provider", "openai-api")
    assert sorted((r["name"], r["set"]) for r in rows(browser)) == [("openai-api/mock-model", "hard"),
                                                                     ("openai-api/mock-model", "toxic")]
    # the provider filter also thins the plot
    assert [p.get_attribute("data-id") for p in browser.find_elements(By.CSS_SELECTOR, "#plot g.point")] == \
        [site["ids"]["openai-api/mock-model"]]
    open_page(browser, site)
    choose(browser, "f-judge", "mock/judge-x")
    assert [(r["name"], r["set"]) for r in rows(browser)] == [("mock/llama-2-beta", "hard")]
    open_page(browser, site)
    choose(browser, "f-source", "published")
    assert len(rows(browser)) == 64 and not any(r["id"] for r in rows(browser))
    open_page(browser, site)
    browser.find_element(By.ID, "f-text").send_keys("gamma")
    assert {r["name"] for r in rows(browser)} == {"mock/mistral-gamma"}
    assert console(browser) == []


def test_hover_shows_a_model_and_a_click_selects_it(browser, site):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    open_page(browser, site)
    beta = site["ids"]["mock/llama-2-beta"]
    point = browser.find_element(By.CSS_SELECTOR, f"#plot g.point[data-id={beta}] circle")
    tip = browser.find_element(By.ID, "tip")
    assert not tip.is_displayed()
    ActionChains(browser).move_to_element(point).perform()
    assert tip.is_displayed()
    # Clopper-Pearson's limits (scipy.stats.binomtest(6, 12).proportion_ci(method="exact"): 21.09, 78.91;
    # 0 of 10: the upper limit 1 - 0.025^(1/10) = 30.85)
    assert tip.text.splitlines() == ["mock/llama-2-beta", "orbench", "OR-Bench Hard-1K: 50.0 [21.1, 78.9]",
                                     "OR-Bench Toxic: 0.0 [0.0, 30.8]", "judge: mock/judge-x; keyword"]
    # three entries with the same rates are drawn at one place: the tip of the one on top names the others
    top = browser.find_element(By.CSS_SELECTOR, f"#plot g.point[data-id={site['ids'][ALPHA_NONE]}] circle")
    ActionChains(browser).move_to_element(top).perform()
    assert tip.text.splitlines()[-1] == f"at the same place: {ALPHA_BRIEF}; {HOSTILE}"
    point.click()
    details = browser.find_element(By.ID, "details")
    assert details.is_displayed() and details.find_element(By.TAG_NAME, "h3").text == "mock/llama-2-beta"
    assert [r["set"] for r in rows(browser) if r["sel"]] == ["hard", "toxic", "xstest-safe"]
    dimmed = browser.find_elements(By.CSS_SELECTOR, "#plot g.point.dim")
    assert len(dimmed) == len(site["ids"]) - 1
    ActionChains(browser).send_keys(Keys.ESCAPE).perform()
    assert not details.is_displayed() and not browser.find_elements(By.CSS_SELECTOR, "#plot g.point.dim")
    # from the table's name: its settings and its meta files, linked relatively to files in the site
    browser.find_element(By.CSS_SELECTOR, f"#board tbody tr[data-id={site['ids'][ALPHA_BRIEF]}] .name").click()
    assert details.find_element(By.TAG_NAME, "h3").text == ALPHA_BRIEF
    assert [r["set"] for r in rows(browser) if r["sel"]] == ["hard", "toxic", "xstest-safe", "xstest-unsafe"]
    text = details.text
    assert "Be brief." in text and "coverage 100%" in text
    links = [a.get_attribute("href") for a in details.find_elements(By.CSS_SELECTOR, "a")]
    assert len(links) == 2 + 4 and all(Path(h[len("file://"):]).is_file() for h in links)
    # and from the model picker
    choose(browser, "pick", site["ids"]["mock/mistral-gamma"])
    assert details.find_element(By.TAG_NAME, "h3").text == "mock/mistral-gamma"
    assert "no rate: bounds [0.0, 99.7]" in details.text  # Clopper-Pearson's outer limit of 9 of 10
    assert console(browser) == []


def test_a_hostile_model_name_is_shown_as_text(browser, site):
    from selenium.common.exceptions import NoAlertPresentException
    from selenium.webdriver.common.by import By

    open_page(browser, site)
    names = [r["name"] for r in rows(browser) if r["id"] == site["ids"][HOSTILE]]
    assert names == [HOSTILE, HOSTILE]
    with pytest.raises(NoAlertPresentException):
        _ = browser.switch_to.alert.text
    assert len(browser.find_elements(By.TAG_NAME, "script")) == 2
    choose(browser, "pick", site["ids"][HOSTILE])
    assert browser.find_element(By.CSS_SELECTOR, "#details h3").text == HOSTILE
    assert console(browser) == []


def test_the_same_folder_served_by_a_plain_static_server_works_alike(browser, site):
    """Any static host: Python's own file server on loopback, nothing else; every link resolves."""
    import functools
    import http.server
    import threading
    import urllib.request

    from selenium.webdriver.common.by import By

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(site["out"])))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}/"
        browser.get_log("browser")
        browser.get(base + "index.html")
        assert browser.execute_script("return document.body.getAttribute('data-ready')") == "1"
        assert len(browser.find_elements(By.CSS_SELECTOR, "#plot g.point")) == len(site["ids"])
        for entry in site["data"]["entries"]:
            for item in entry["records"] + entry["provenance"]:
                with urllib.request.urlopen(base + item["href"]) as reply:
                    assert reply.status == 200 and json.loads(reply.read())
        assert console(browser) == []
    finally:
        server.shutdown()
        server.server_close()
