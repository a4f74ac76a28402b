"""The words the suite writes into its outputs and reads back: outcomes, labels and verdict kinds.

Every cell value that carries meaning across stages is spelled here once, and every module that
writes or reads one imports it from here (the stages, the label parser, the report, the release
builder). The values are part of the output format: renaming one changes every CSV the suite
writes, so they only ever gain new members.

A provider block (the provider itself refused the request or withheld the reply) is spelled
:data:`PROVIDER_BLOCK` wherever it is written: a moderator's label (stage 3), ``refusal_source``
(stage 4) and ``answer_category`` (stage 5). Files written before this spelling was unified say
``provider`` (``refusal_source``) or ``provider_refusal`` (``answer_category``); these are still
read (:data:`OLD_PROVIDER_BLOCK`, :func:`is_provider_block`), never written.

Moderation (stage 3, ``<moderator>_label`` and ``moderation_category``)
    a category name (``orbench.benchmark.categories``), :data:`NONE`, :data:`UNPARSED`,
    :data:`PROVIDER_BLOCK`; for the ensemble also :data:`UNDECIDED` and :data:`SKIPPED_EMPTY`.
    :data:`SKIPPED_ERROR` is the original tool's marker of a failed row, still read.

Alignment (stage 4)
    ``refusal_source``: :data:`SOURCE_KEYWORD`, :data:`PROVIDER_BLOCK`, :data:`EMPTY_RESPONSE`,
    :data:`SKIPPED_EMPTY`, or empty for an answer. ``refusal_kind``: :data:`FULL` or
    :data:`PARTIAL`.

Judge (stage 5, ``answer_category``)
    :data:`JUDGE_CLASSES` (:data:`DIRECT_ANSWER`, :data:`DIRECT_REFUSAL`,
    :data:`INDIRECT_REFUSAL`), :data:`UNPARSED` or :data:`JUDGE_REFUSED` (the judge refused to
    judge); :data:`PROVIDER_BLOCK` and :data:`EMPTY_RESPONSE` for rows not sent to the judge;
    :data:`KEYWORD_REFUSAL` / :data:`KEYWORD_ANSWER` for a keyword re-score, whose
    ``judge_model`` is :data:`KEYWORD`; for an ensemble of judges also :data:`UNDECIDED` (no
    majority verdict).

Prompt kinds (``prompt_kind``, stage 4 and 5)
    :data:`SAFE_PROMPT` (meant to be answered: Hard-1K, 80K, XSTest's safe prompts) or
    :data:`UNSAFE_PROMPT` (meant to be refused: Toxic, XSTest's unsafe prompts); empty when
    unknown.
"""

from __future__ import annotations

#: Moderation: "none of the above" (the prompt is safe).
NONE = "none"
#: A moderation or judge reply from which no single, unambiguous label can be read.
UNPARSED = "unparsed"
#: The provider blocked the request or withheld the reply: a moderator's label (counts as toxic),
#: ``refusal_source`` of a blocked reply (a rejection), ``answer_category`` of a row not judged
#: because the tested model's provider blocked it (a rejection).
PROVIDER_BLOCK = "provider_block"
#: Earlier spellings of :data:`PROVIDER_BLOCK` (``refusal_source`` / ``answer_category``), read only.
OLD_PROVIDER_BLOCK = frozenset({"provider", "provider_refusal"})
#: Ensemble: no strict majority for safe or for toxic.
UNDECIDED = "undecided"
#: A row with an empty text: nothing was sent (moderation category, refusal source).
SKIPPED_EMPTY = "skipped_empty"
#: The original tool's ``moderation_category`` / ``answer_category`` for a failed row (read only).
SKIPPED_ERROR = "skipped_error"

#: Judge class: the response answers the prompt.
DIRECT_ANSWER = "direct_answer"
#: Judge class: the response refuses outright.
DIRECT_REFUSAL = "direct_refusal"
#: Judge class: the response refuses by deflecting or answering something else.
INDIRECT_REFUSAL = "indirect_refusal"
#: The judge's classes, numbered 1..3 in the template.
JUDGE_CLASSES: tuple[str, ...] = (DIRECT_ANSWER, DIRECT_REFUSAL, INDIRECT_REFUSAL)
#: Judge classes that count as a rejection.
REFUSAL_CLASSES = frozenset({DIRECT_REFUSAL, INDIRECT_REFUSAL})

#: ``answer_category`` when the judge refused to judge ("I'm sorry, I can't assist with that") or
#: its provider blocked the judging request: no verdict, counted apart from :data:`UNPARSED`.
JUDGE_REFUSED = "judge_refused"

#: ``prompt_kind``: a prompt meant to be answered (an over-refusal benchmark's prompts).
SAFE_PROMPT = "safe"
#: ``prompt_kind``: a prompt meant to be refused (harmful prompts such as OR-Bench-Toxic).
UNSAFE_PROMPT = "unsafe"
#: The prompt kinds.
PROMPT_KINDS = (SAFE_PROMPT, UNSAFE_PROMPT)

#: ``answer_category`` / ``refusal_source`` of an empty reply with no block: no verdict.
EMPTY_RESPONSE = "empty_response"
#: ``answer_category`` of a keyword re-score that found a refusal.
KEYWORD_REFUSAL = "keyword_refusal"
#: ``answer_category`` of a keyword re-score that found none.
KEYWORD_ANSWER = "keyword_answer"
#: The keyword re-score's classes.
KEYWORD_CLASSES = frozenset({KEYWORD_REFUSAL, KEYWORD_ANSWER})

#: ``refusal_source``: the keyword matcher found a refusal.
SOURCE_KEYWORD = "keyword"

#: ``refusal_kind``: a refusal that gives no help.
FULL = "full"
#: ``refusal_kind``: a refusal and help in one reply.
PARTIAL = "partial"

#: ``judge_model`` of a keyword re-score, and the report's name for keyword verdicts.
KEYWORD = "keyword"
#: The report's name for judge verdicts.
JUDGE = "judge"

#: Whether each stage-5 class is a rejection, for a judge file with no ``is_rejected`` column.
REJECTED_BY_CLASS: dict[str, bool] = {
    DIRECT_REFUSAL: True, INDIRECT_REFUSAL: True, DIRECT_ANSWER: False,
    PROVIDER_BLOCK: True, "provider_refusal": True, KEYWORD_REFUSAL: True, KEYWORD_ANSWER: False,
}


def is_provider_block(value) -> bool:
    """True for a cell that records a provider block, in the current or an earlier spelling."""
    text = str(value or "").strip()
    return text == PROVIDER_BLOCK or text in OLD_PROVIDER_BLOCK
