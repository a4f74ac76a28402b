"""What a stage's rows came to: the counts its summary line states and the warnings it gives.

A run that "finished with 0 errors" can still have decided nothing: a judge whose every reply was
unparsed, moderators that never agreed, replies all cut off at the token limit. Each stage
therefore states its outcomes on its summary line (and in its meta file, ``outcomes``), and
warns when more than :data:`WARN_SHARE` of its rows have no verdict:

- stage 3 (moderate): safe / toxic / undecided / skipped, and the unparsed votes;
- stage 4 (check alignment): refusals (provider blocks among them), answers, empty responses,
  skipped prompts, replies cut off; with ``--samples`` prompts x samples = rows;
- stage 5 (check response): every ``answer_category`` (each judge class, unparsed, the judge
  refusing to judge (an ensemble's rows where most judges gave no verdict among them), an
  ensemble's undecided rows (its judges' verdicts split) and majority refusals without a majority
  class, provider blocks, empty responses, skipped prompts) and the responses cut off, whoever
  judged them.

Only the outcomes that mean "no verdict could be read" count towards a warning (an unparsed
judge or moderator reply, a judge refusing to judge, an undecided ensemble, an empty response); any other outcome a stage
writes (a provider block, a skipped empty prompt, a class of its own) is counted apart and does
not. Warnings never change the exit code: 0 all rows done, 1 some rows have errors.

Stages 3 and 5 also warn *early* (:class:`EarlyCheck`), while the run goes on: as soon as a
model has replied on :data:`EARLY_ROWS` rows of this run and more than half of those replies gave
no verdict, one ``warning:`` line on stderr names the model, says what it means (the model cannot
follow the template) and what to do, instead of leaving it to the end of a long, paid run.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import pandas as pd
from tqdm import tqdm

from orbench.scoring.vocab import (
    EMPTY_RESPONSE,
    JUDGE_CLASSES,
    JUDGE_REFUSED,
    PROVIDER_BLOCK,
    SKIPPED_EMPTY,
    SOURCE_KEYWORD,
    UNDECIDED,
    UNPARSED,
    is_provider_block,
)

#: Above this share of rows with no verdict (or replies cut off) a stage warns.
WARN_SHARE = 0.05
#: Stage 5's count of an ensemble's majority refusals with no majority class (empty answer_category).
MAJORITY_REFUSAL = "majority_refusal_no_class"
#: ``finish_reason`` values meaning "cut off at the token limit": OpenAI-compatible ``length``,
#: Anthropic ``max_tokens``, Gemini ``MAX_TOKENS``, OpenAI Responses ``max_output_tokens``.
TRUNCATED_FINISH_REASONS = frozenset({"length", "max_tokens", "max_output_tokens"})


def is_truncated(finish_reason: object) -> bool:
    """True when a ``finish_reason`` cell says the reply hit the token limit."""
    return str(finish_reason).strip().lower() in TRUNCATED_FINISH_REASONS


@dataclass
class Outcomes:
    """A run's outcome counts (for the meta file), the summary's text and its warnings."""

    counts: dict[str, int]
    text: str
    warnings: list[str] = field(default_factory=list)


def _done(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows this stage finished (no error, neither its own nor an earlier stage's)."""
    if "error" not in frame.columns:
        return frame
    return frame[frame["error"].astype(str).str.strip() == ""]


def _column(frame: pd.DataFrame, name: str) -> pd.Series:
    if name not in frame.columns:
        return pd.Series("", index=frame.index, dtype=object)
    return frame[name].map(lambda v: "" if v is None or (isinstance(v, float) and v != v) else str(v).strip())


def _share(part: int, whole: int) -> str:
    return f"{part} of {whole} ({100 * part / whole:.0f}%)"


def _cut_off(done: pd.DataFrame, what: str, limit: object) -> tuple[int, list[str]]:
    """Replies cut off at the token limit among ``done``, and a warning above the share."""
    reasons = _column(done, "finish_reason")
    cut = int(reasons.map(is_truncated).sum())
    replies = int((reasons != "").sum())
    warnings = []
    if replies and cut / replies > WARN_SHARE:
        at = f"max_tokens {limit}" if limit is not None else "the token limit"
        warnings.append(f"{_share(cut, replies)} {what} were cut off at {at} (finish_reason length): their "
                        f"verdicts judge only the opening of each reply")
    return cut, warnings


def alignment(frame: pd.DataFrame, *, samples: int | None = None, max_tokens: object = None) -> Outcomes:
    """Stage 4: refusals (provider blocks among them), answers, empty responses, skipped prompts,
    cut-off replies; with ``samples``, prompts x samples = rows."""
    done = _done(frame)
    source = _column(done, "refusal_source")
    rejected = _column(done, "is_rejected").str.lower()
    counts = {"refusals": int((rejected == "true").sum()),
              "keyword_refusals": int((source == SOURCE_KEYWORD).sum()),
              "provider_blocks": int(source.map(is_provider_block).sum()),
              "answers": int((rejected == "false").sum()),
              "empty_responses": int((source == EMPTY_RESPONSE).sum()),
              "skipped_empty_prompts": int((source == SKIPPED_EMPTY).sum())}
    counts["cut_off"], warnings = _cut_off(done, "replies", max_tokens)
    text = (f"{counts['refusals']} refusals ({counts['provider_blocks']} provider blocks), {counts['answers']} "
            f"answers, {counts['empty_responses']} empty responses, {counts['skipped_empty_prompts']} empty "
            f"prompts skipped, {counts['cut_off']} cut off")
    if samples is not None:
        prompts = len(frame) // samples if samples else 0
        text = f"{prompts} prompts x {samples} samples = {len(frame)} rows: " + text
    no_verdict = counts["empty_responses"]
    asked = len(done) - counts["skipped_empty_prompts"]
    if asked and no_verdict / asked > WARN_SHARE:
        warnings.append(f"{_share(no_verdict, asked)} replies were empty (no text, no provider block): those "
                        f"rows have no verdict")
    return Outcomes(counts, text, warnings)


def judged(frame: pd.DataFrame) -> Outcomes:
    """Stage 5: every ``answer_category``, in a stable order (the judge's classes first), and the
    responses cut off whoever judged them; warns when more than 5% of the replies the judge was
    asked about could not be parsed."""
    done = _done(frame)
    # an ensemble's majority refusal with no majority class leaves answer_category empty
    category = _column(done, "answer_category").replace("", MAJORITY_REFUSAL)
    found = category.value_counts()
    judge = _column(done, "judge_model")
    asked = int(category.isin([*JUDGE_CLASSES, UNPARSED, JUDGE_REFUSED, UNDECIDED, MAJORITY_REFUSAL]).sum())
    by_judge = asked or (judge != "keyword").any() and (judge != "").any()
    order = [*JUDGE_CLASSES, UNPARSED] if by_judge else []  # a judge's classes, each even at 0
    order += sorted(c for c in found.index if c not in order and c)
    counts = {c: int(found.get(c, 0)) for c in order}
    cut, cut_warnings = _cut_off(done, "responses", None)
    text = ", ".join(f"{n} {c}" for c, n in counts.items())
    if "finish_reason" in done.columns:
        counts["responses_cut_off"] = cut
        text += f"; {cut} responses cut off"
    warnings = []
    unparsed = counts.get(UNPARSED, 0)
    if asked and unparsed / asked > WARN_SHARE:
        warnings.append(f"{_share(unparsed, asked)} judge replies were unparsed (no class the strict parser "
                        f"could read): those rows have no verdict (past 5% of a set's rows, the report gives no rate, "
                        f"only its bounds); read their answer_type_response, then try another judge or --template")
    refused, undecided = counts.get(JUDGE_REFUSED, 0), counts.get(UNDECIDED, 0)
    if asked and refused / asked > WARN_SHARE:
        warnings.append(f"{_share(refused, asked)} judge replies were the judge refusing to judge (or its "
                        f"provider blocking the request): those rows have no verdict; try another judge")
    if asked and undecided / asked > WARN_SHARE:
        warnings.append(f"{_share(undecided, asked)} rows are undecided (the judges' verdicts split, no majority): those rows "
                        f"have no verdict; read the <judge>_raw columns")
    if not warnings and asked and (unparsed + refused + undecided) / asked > WARN_SHARE:
        warnings.append(f"{_share(unparsed + refused + undecided, asked)} judge replies gave no verdict "
                        f"({unparsed} unparsed, {refused} the judge refusing to judge, {undecided} undecided): "
                        f"past 5% of a set's rows, the report gives no rate, only its bounds")
    return Outcomes(counts, text or "no rows judged", warnings + cut_warnings)


def moderated(frame: pd.DataFrame) -> Outcomes:
    """Stage 3: safe / toxic / undecided / skipped, and the unparsed votes; warns when more than
    5% of the moderated rows are undecided."""
    done = _done(frame)
    category = _column(done, "moderation_category")
    toxic = _column(done, "is_toxic").str.lower()
    votes = pd.to_numeric(_column(done, "unparsed_votes"), errors="coerce").fillna(0)
    counts = {"safe": int((toxic == "false").sum()), "toxic": int((toxic == "true").sum()),
              "undecided": int((category == UNDECIDED).sum()),
              "skipped_empty": int((category == SKIPPED_EMPTY).sum()),
              "unparsed_votes": int(votes.sum()),
              "provider_block_votes": int(sum((_column(done, c) == PROVIDER_BLOCK).sum()
                                              for c in done.columns if c.endswith("_label")))}
    text = (f"{counts['safe']} safe, {counts['toxic']} toxic, {counts['undecided']} undecided, "
            f"{counts['skipped_empty']} skipped (empty); {counts['unparsed_votes']} unparsed votes")
    moderated_rows = len(done) - counts["skipped_empty"]
    warnings = []
    if moderated_rows and counts["undecided"] / moderated_rows > WARN_SHARE:
        warnings.append(f"{_share(counts['undecided'], moderated_rows)} rows are undecided (no strict majority "
                        f"of the moderators, e.g. unparsed replies: {counts['unparsed_votes']} votes): they go "
                        f"to no subset of a release; read the <moderator>_raw columns")
    return Outcomes(counts, text, warnings)


#: The early check looks at each model's first this many replies of a run (stages 3 and 5).
EARLY_ROWS = 20


class EarlyCheck:
    """The early warning of stages 3 and 5: wraps a stage's ``decide`` and, as soon as a model has
    replied on :data:`EARLY_ROWS` rows of this run and more than half of those replies gave no
    verdict, prints one ``warning:`` line on stderr (through tqdm, so a progress bar is not torn),
    once per model. The rows are decided as before; the run goes on and its exit code keeps its
    meaning. Only rows the model was asked about count (a row decided without a model, such as
    the cascade's keyword rows or an empty prompt, does not), and only rows decided in this run
    (not resumed ones: the end-of-run summary counts those).

    ``models``: each model's name as the warning gives it, in the order of the row's requests;
    ``silent(settings, result)``: for each model, True when its reply on this row gave no verdict
    (False when it did); ``what(model, silent, asked)``: the warning's text.
    """

    def __init__(self, decide: Callable, models: Sequence[str],
                 silent: Callable[[object, dict], Sequence[bool]], what: Callable[[str, int, int], str]) -> None:
        self._decide, self.models, self._silent, self._what = decide, list(models), silent, what
        self.asked = [0] * len(self.models)
        self.none = [0] * len(self.models)
        self.warned: list[str] = []
        self._lock = threading.Lock()  # a runner may decide rows on several threads

    def __call__(self, settings, row: dict, answers: list):
        result = self._decide(settings, row, answers)
        if not (answers and isinstance(result, dict)):
            return result
        with self._lock:
            for i, silent in enumerate(self._silent(settings, result)):
                if self.asked[i] >= EARLY_ROWS:
                    continue
                self.asked[i] += 1
                self.none[i] += bool(silent)
                if self.asked[i] == EARLY_ROWS and 2 * self.none[i] > EARLY_ROWS:
                    text = self._what(self.models[i], self.none[i], EARLY_ROWS)
                    self.warned.append(text)
                    tqdm.write(f"warning: {text}", file=sys.stderr)
        return result
