"""Unit tests for orbench.scoring.parsing: list extraction from many reply shapes, cleaning, dedup forms."""

from __future__ import annotations

import pytest

from orbench.benchmark.categories import CATEGORIES, check_category
from orbench.llm.errors import UsageError
from orbench.scoring.parsing import clean_item, dedupe, example_forms, extract_items, normalise_for_dedup


@pytest.mark.parametrize("reply, expected", [
    # the asked-for format, one per line
    ("[[How do I pick a lock?]]\n[[How do I hotwire a car?]]",
     ["How do I pick a lock?", "How do I hotwire a car?"]),
    # several on one line: the original's greedy match merged these into one item
    ("[[first one]] and [[second one]] [[third]]", ["first one", "second one", "third"]),
    # numbered inside the brackets, as the rewrite template asks
    ("[[1. alpha question]]\n[[2. beta question]]\n[[3) gamma question]]",
     ["alpha question", "beta question", "gamma question"]),
    # preamble and closing chatter around bracketed items are ignored
    ("Sure! Here are the prompts:\n\n1. [[one thing]]\n2. [[another thing]]\nHope this helps.",
     ["one thing", "another thing"]),
    # a whole numbered list inside one bracket pair
    ("[[1. a first\n2. a second\n3. a third]]", ["a first", "a second", "a third"]),
    # an item wrapped over two lines
    ("[[How would someone\n  get into a locked car?]]", ["How would someone get into a locked car?"]),
    # a stray unclosed [[ does not swallow the items after it
    ("[[broken item\n[[good one]]\n[[good two]]", ["good one", "good two"]),
    # triple brackets and stray brackets are trimmed
    ("[[[odd brackets]]]", ["odd brackets"]),
    # guillemets fallback
    ("«first prompt» then «second prompt»", ["first prompt", "second prompt"]),
    # numbered-line fallbacks, with markdown bold and quotes
    ('Here you go:\n1. "Quoted first"\n2) **Bold** second\n(3) third one\n10. tenth',
     ["Quoted first", "Bold second", "third one", "tenth"]),
    # bullet fallback
    ("- dash item\n* star item\n• dot item", ["dash item", "star item", "dot item"]),
    # "Prompt N:" labels inside brackets
    ('[[Prompt 1: "How do I open a safe?"]]', ["How do I open a safe?"]),
    # empty items are dropped
    ("[[]] [[ 2. ]] [[real]]", ["real"]),
])
def test_extract_items_formats(reply, expected):
    assert extract_items(reply) == expected


def test_bracketed_items_win_over_numbered_lines():
    reply = "1. This numbered line is commentary\n[[the real item]]"
    assert extract_items(reply) == ["the real item"]


def test_decimal_line_is_not_a_numbered_item():
    assert extract_items("2.5 grams is the dose\nno list here") == []


@pytest.mark.parametrize("reply", [None, "", "I cannot help with that request.",
                                   "Sorry, no.\nI won't do this."])
def test_no_items(reply):
    assert extract_items(reply) == []


@pytest.mark.parametrize("raw, expected", [
    ("1. How do locks work?", "How do locks work?"),
    ("1.How do locks work?", "How do locks work?"),
    ("12) twelve", "twelve"),
    ("(4) four", "four"),
    ("#3 third", "third"),
    ("- 2. nested marker", "nested marker"),
    ('"1. quoted and numbered"', "quoted and numbered"),
    ("“curly quoted”", "curly quoted"),
    # real leading numbers are content (the original turned "3D printer" into "D printer")
    ("3D printer settings for a gun part", "3D printer settings for a gun part"),
    ("3.5 grams of what is too much?", "3.5 grams of what is too much?"),
    ("1. 3D printer question", "3D printer question"),
    ("5G towers and health", "5G towers and health"),
    ("911 call scripts", "911 call scripts"),
    ("2024 election rumours", "2024 election rumours"),
    # quotes that are not one pair around the whole text stay
    ('"A" or "B"?', '"A" or "B"?'),
    ("[[ spaced   out \n text ]]", "spaced out text"),
    ("Question 5-1 about locks", "Question 5-1 about locks"),
    ("Prompt 2: the real text", "the real text"),
    ("Question 3.5 of the exam", "Question 3.5 of the exam"),
    ("...", ""),
])
def test_clean_item(raw, expected):
    assert clean_item(raw) == expected


@pytest.mark.parametrize("a, b", [
    ("How do I pick a lock?", "how do i pick a lock"),
    ("How do I pick a lock?", "  How   do I pick a lock ?! "),
    ("“Is it okay?”", '"is it okay?"'),
    ("Don’t tell anyone.", "Don't tell anyone"),
    ("Ｆｕｌｌｗｉｄｔｈ text", "fullwidth text"),
])
def test_normalise_equal(a, b):
    assert normalise_for_dedup(a) == normalise_for_dedup(b)


@pytest.mark.parametrize("a, b", [
    ("How do I pick a lock?", "How do I pick two locks?"),
    ("3D printer", "D printer"),
    ("Is it okay?", "It is okay?"),
])
def test_normalise_different(a, b):
    assert normalise_for_dedup(a) != normalise_for_dedup(b)


def test_dedupe_keeps_first_and_order_and_shares_seen():
    seen: set[str] = set()
    first = dedupe(["B thing", "a thing", "b thing.", "A Thing", "c"], seen)
    assert first == ["B thing", "a thing", "c"]
    assert dedupe(["C", "d", "D!"], seen) == ["d"]
    assert dedupe(["", "  ", "x"]) == ["x"]


def test_categories_single_list():
    assert CATEGORIES == ("deception", "harassment", "harmful", "hate", "illegal", "privacy",
                          "self-harm", "sexual", "unethical", "violence")
    assert check_category(" Self_Harm ") == "self-harm"
    with pytest.raises(UsageError) as info:
        check_category("weapons")
    assert "deception" in str(info.value) and "violence" in str(info.value)
    assert "\n" not in str(info.value)


def test_example_forms_bracketed_lined_and_labelled():
    template = ("Rewrite the prompt.\n"
                "Example\nHarmful prompt: How do I pick my neighbour's lock?\n"
                "[[1. How do locksmiths open a door without damage?]] [[2. Second one]]\n"
                "[rewritten prompt]\nOpen my own car after losing the keys.\n"
                "Harmful prompt: {seed}\nNew prompts:")
    forms = example_forms(template)
    for copied in ("How do I pick my neighbour’s lock", "HOW DO LOCKSMITHS OPEN A DOOR WITHOUT DAMAGE",
                   "second one.", "Open my own car after losing the keys", "rewritten prompt"):
        assert normalise_for_dedup(copied) in forms, copied
    # the placeholder line is filled per request: neither it nor the seed it will hold counts
    assert not any("{seed}" in form or form == "harmful prompt:" for form in forms)
    assert normalise_for_dedup("How do locksmiths open a door?") not in forms
    assert "" not in forms


def test_example_forms_of_a_format_only_template_are_empty():
    assert example_forms("Generate 20 {category} prompts, each like this: [[...]]") == frozenset()
    assert example_forms("") == frozenset()
