"""OR-Bench (and XSTest) as inspect_ai tasks: ``orbench/or_bench_hard_1k``, ``orbench/or_bench_toxic``,
``orbench/or_bench_80k``, ``orbench/xstest_safe``, ``orbench/xstest_unsafe``.

Installed with ``pip install "orbench[inspect]"`` and registered under the ``inspect_ai`` entry
point group (``pyproject.toml``), so inspect finds the tasks by name::

    inspect eval orbench/or_bench_hard_1k --model openai/gpt-4o
    inspect eval orbench/or_bench_toxic --model openai/gpt-4o -T scorer=both -T judge_model=openai/gpt-4o
    inspect eval orbench/or_bench_80k --model openai/gpt-4o -T per_category=50 -T seed=1

Hard-1K, Toxic and XSTest's 250 safe and 200 unsafe prompts are the copies bundled in
``orbench/data`` (no network); 80K is read from
``hf://datasets/bench-llm/or-bench/or-bench-80k.csv`` (needs ``huggingface_hub``, part of the
extra). Each prompt is sent as one user message, as stage 4 sends it: temperature 0 and at most
1000 tokens unless told otherwise, no system prompt unless ``system_prompt`` is given.

Task parameters (``-T name=value``):

- ``scorer``: ``keyword`` (default; stage 4's matcher), ``judge`` (stage 5's LLM judge) or ``both``;
- ``judge_model``: the judge, an inspect model name or one of this project's short names
  (``gpt4``); several comma-separated make an ensemble (the majority decides, as stage 5's
  ``--check_model A,B,C``); default inspect's ``grader`` model role, else
  ``openai/gpt-4-turbo-2024-04-09``;
- ``cascade``: ``true`` lets the keyword matcher decide the responses it is sure of and sends
  only the rest to the judge (stage 5's ``--cascade``; each sample carries its set's prompt kind);
- ``judge_template``: a file with the judge prompt (``{prompt}`` and ``{response}``), checked as
  ``--template`` is checked in stage 5;
- ``per_category`` and ``seed``: a seeded sample of that many prompts per category (as
  ``python -m orbench.benchmark.datasets``);
- ``system_prompt``, ``temperature`` (default 0, as in the paper), ``max_tokens`` (default 1000);
- ``matcher``: the keyword rule family (default: chosen from the tested model's name).

inspect's own ``--limit``, ``--sample-id`` and ``--epochs`` work as usual. The scorers and metrics
are in :mod:`orbench.integrations.inspect_scorers`; ``orbench-inspect-to-csv`` turns a log into the
stage-4/5 CSV that ``orbench-report`` reads.
"""

from __future__ import annotations

from inspect_ai import Task, task
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.model import ChatMessageSystem, GenerateConfig
from inspect_ai.solver import Generate, Solver, TaskState, generate, solver

from orbench.benchmark.datasets import EIGHTY_K, HARD_1K, TOXIC, resolve_set, stratified_sample
from orbench.benchmark.prompts import JUDGE_TEMPLATE
from orbench.benchmark.sets import PROMPT_KIND_COLUMN, XSTEST_SAFE, XSTEST_UNSAFE, set_kind
from orbench.integrations.inspect_scorers import judge_refusal, keyword_refusal
from orbench.llm.errors import UsageError
from orbench.run.tables import read_table
from orbench.run.templates import load_template
from orbench.scoring.refusal import FAMILIES

SCORERS = ("keyword", "judge", "both")
NO_CATEGORY = "(none)"


def or_bench_dataset(set_name: str, per_category: int | None = None, seed: int = 0) -> MemoryDataset:
    """The prompts of ``set_name`` as samples: input the prompt, id its 1-based row in the set,
    metadata ``category`` and ``prompt_kind`` (the set's). ``per_category`` draws a seeded sample
    per category."""
    path = resolve_set(set_name)
    if path is None:
        raise ValueError(f"unknown OR-Bench set {set_name!r}")
    try:
        frame = read_table(path, needs=["prompt"], what=f"the {set_name} set")
    except UsageError as exc:
        raise ValueError(str(exc)) from None
    if per_category is not None:
        if int(per_category) < 1:
            raise ValueError(f"per_category must be at least 1, got {per_category}")
        frame = stratified_sample(frame, int(per_category), int(seed))
    categories = frame["category"] if "category" in frame.columns else None
    samples = []
    for position, (index, prompt) in enumerate(frame["prompt"].items()):
        text = "" if prompt is None else str(prompt)
        if not text.strip():
            continue  # stage 4 sends nothing for an empty prompt either
        category = str(categories.iloc[position]).strip() if categories is not None else ""
        samples.append(Sample(input=text, id=int(index) + 1,
                              metadata={"category": category or NO_CATEGORY,
                                        PROMPT_KIND_COLUMN: set_kind(set_name)}))
    return MemoryDataset(samples, name=set_name, location=path)


@solver
def system_prompt_solver(text: str) -> Solver:
    """Put ``text`` first as the system message, exactly as written (no template filling)."""

    async def solve(state: TaskState, generate: Generate) -> TaskState:
        state.messages.insert(0, ChatMessageSystem(content=text))
        return state

    return solve


def or_bench_task(set_name: str, scorer: str = "keyword", judge_model: str | None = None,
                  judge_template: str | None = None, per_category: int | None = None,
                  seed: int = 0, system_prompt: str | None = None, temperature: float = 0.0,
                  max_tokens: int = 1000, matcher: str | None = None, cascade: bool = False) -> Task:
    """The task for one set; the registered tasks call this (parameters: module docstring)."""
    method = str(scorer).strip().lower()
    if method not in SCORERS:
        raise ValueError(f"scorer must be one of {', '.join(SCORERS)}, got {scorer!r}")
    if matcher is not None and matcher not in FAMILIES:
        raise ValueError(f"matcher must be one of {', '.join(FAMILIES)}, got {matcher!r}")
    if method == "keyword" and (judge_model or judge_template or cascade):
        raise ValueError("judge_model, judge_template and cascade need scorer=judge or scorer=both")
    try:
        template, _ = load_template(judge_template, JUDGE_TEMPLATE, {"prompt", "response"})
    except UsageError as exc:
        raise ValueError(f"judge_template: {exc}") from None
    scorers = []
    if method in ("keyword", "both"):
        scorers.append(keyword_refusal(matcher=matcher))
    if method in ("judge", "both"):
        scorers.append(judge_refusal(template=template, judge_model=judge_model, matcher=matcher,
                                     cascade=bool(cascade)))
    solvers = ([system_prompt_solver(system_prompt)] if system_prompt else []) + [generate()]
    return Task(
        dataset=or_bench_dataset(set_name, per_category, seed),
        solver=solvers,
        scorer=scorers,
        config=GenerateConfig(temperature=float(temperature), max_tokens=int(max_tokens)),
        metadata={"orbench_set": set_name},
    )


@task
def or_bench_hard_1k(scorer: str = "keyword", judge_model: str | None = None,
                     judge_template: str | None = None, per_category: int | None = None,
                     seed: int = 0, system_prompt: str | None = None, temperature: float = 0.0,
                     max_tokens: int = 1000, matcher: str | None = None, cascade: bool = False) -> Task:
    """OR-Bench Hard-1K: 1,319 seemingly toxic prompts (bundled); a low rejection rate is good."""
    return or_bench_task(HARD_1K, scorer, judge_model, judge_template, per_category, seed,
                         system_prompt, temperature, max_tokens, matcher, cascade)


@task
def or_bench_toxic(scorer: str = "keyword", judge_model: str | None = None,
                   judge_template: str | None = None, per_category: int | None = None,
                   seed: int = 0, system_prompt: str | None = None, temperature: float = 0.0,
                   max_tokens: int = 1000, matcher: str | None = None, cascade: bool = False) -> Task:
    """OR-Bench Toxic: 655 toxic prompts (bundled); a high rejection rate is good."""
    return or_bench_task(TOXIC, scorer, judge_model, judge_template, per_category, seed,
                         system_prompt, temperature, max_tokens, matcher, cascade)


@task
def or_bench_80k(scorer: str = "keyword", judge_model: str | None = None,
                 judge_template: str | None = None, per_category: int | None = None,
                 seed: int = 0, system_prompt: str | None = None, temperature: float = 0.0,
                 max_tokens: int = 1000, matcher: str | None = None, cascade: bool = False) -> Task:
    """OR-Bench 80K: the seemingly toxic prompts, read from the hub (use per_category or --limit)."""
    return or_bench_task(EIGHTY_K, scorer, judge_model, judge_template, per_category, seed,
                         system_prompt, temperature, max_tokens, matcher, cascade)


@task
def xstest_safe(scorer: str = "keyword", judge_model: str | None = None,
                judge_template: str | None = None, per_category: int | None = None,
                seed: int = 0, system_prompt: str | None = None, temperature: float = 0.0,
                max_tokens: int = 1000, matcher: str | None = None, cascade: bool = False) -> Task:
    """XSTest's 250 safe prompts (bundled, CC-BY-4.0); a low rejection rate is good."""
    return or_bench_task(XSTEST_SAFE, scorer, judge_model, judge_template, per_category, seed,
                         system_prompt, temperature, max_tokens, matcher, cascade)


@task
def xstest_unsafe(scorer: str = "keyword", judge_model: str | None = None,
                  judge_template: str | None = None, per_category: int | None = None,
                  seed: int = 0, system_prompt: str | None = None, temperature: float = 0.0,
                  max_tokens: int = 1000, matcher: str | None = None, cascade: bool = False) -> Task:
    """XSTest's 200 unsafe contrast prompts (bundled, CC-BY-4.0); a high rejection rate is good."""
    return or_bench_task(XSTEST_UNSAFE, scorer, judge_model, judge_template, per_category, seed,
                         system_prompt, temperature, max_tokens, matcher, cascade)
