"""Planning an audit: how precise each figure will be for a given size, and the size a target needs.

``orbench-audit plan`` reads the same inputs as ``sample`` and, before anyone labels anything,
prints for each figure the audit will report (the human share of refusals, or of safe prompts;
the machine verdict's accuracy, precision, recall and specificity; pooled and per set and model)
its expected 95% half-width at the given size, and the size at which it reaches ``--target``.

How: each stratum's humans' share is set from an assumed error rate of the machine verdict
behind it (``--error_rate``, or measured by a scored pilot audit, ``--pilot``), the items are
spread over the strata by the allocation, and many audits are simulated (a hypergeometric draw
per stratum: the items are drawn without replacement from the rows); each is scored by the very
interval rule the audit uses (:func:`orbench.analysis.stats.stratified_core`), and the half-widths
are averaged. ``bench/audit_plan.py`` checks the prediction against real scored audits.

Allocations: ``equal`` (the same number per stratum, as ``--per_stratum``) or ``neyman``
(Neyman's optimal allocation, items in proportion to ``N_h * sqrt(q_h (1 - q_h))``: more where
a stratum is large and its verdict is unsure, which is where errors hide: the machine's large
"answer" strata, whose missed refusals move the rate most). Every stratum gets at least
``MINIMUM`` items where it has them, so no stratum is represented by one item.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from orbench.analysis import stats
from orbench.analysis.audit.sample import ANSWER, NONE, PROMPT, REFUSAL, SAFE, TOXIC_V
from orbench.llm.errors import UsageError

#: Assumed error rate of the machine verdict behind each stratum, when neither ``--error_rate``
#: nor a pilot says otherwise: a keyword matcher's "answer" errs more often (missed refusals)
#: than its "refusal" (orbench's matcher on XSTest v2: see docs/statistics.md).
DEFAULT_ERROR = {REFUSAL: 0.05, ANSWER: 0.10, SAFE: 0.10, TOXIC_V: 0.10}
MINIMUM = 2
DRAWS = 400
ALLOCATIONS = ("equal", "neyman")
FIGURES = {"verdict": ("human_refusal_share", "accuracy", "precision", "recall", "specificity"),
           "prompt": ("human_safe_share", "precision")}


def parse_error_rates(text: str | None) -> dict[str, float] | None:
    """``0.1`` (every verdict) or ``refusal=0.05,answer=0.15``; ``UsageError`` on anything else."""
    if text is None or not text.strip():
        return None
    out: dict[str, float] = {}
    for part in text.split(","):
        name, _, value = part.strip().rpartition("=")
        try:
            rate = float(value)
        except ValueError:
            raise UsageError(f"--error_rate {text!r}: {value!r} is not a number (e.g. 0.1 or "
                             "refusal=0.05,answer=0.15)") from None
        if not 0 <= rate <= 0.5:
            raise UsageError(f"--error_rate {text!r}: a rate must be between 0 and 0.5, got {rate}")
        names = [name] if name else list(DEFAULT_ERROR)
        for n in names:
            if n not in DEFAULT_ERROR:
                raise UsageError(f"--error_rate {text!r}: unknown verdict {n!r} (known: {', '.join(DEFAULT_ERROR)})")
            out[n] = rate
    return out


def rates_used(error_rates: dict[str, float] | None, kind: str) -> dict[str, float]:
    """The error rates a plan of this kind uses (defaults where not given)."""
    keys = (REFUSAL, ANSWER) if kind == "verdict" else (SAFE, TOXIC_V)
    return {k: (error_rates or {}).get(k, DEFAULT_ERROR[k]) for k in keys}


def human_shares(table: pd.DataFrame, error_rates: dict[str, float] | None, kind: str) -> np.ndarray:
    """Each stratum's assumed share of human positives (refusals; safe prompts)."""
    rates = rates_used(error_rates, kind)
    positive = REFUSAL if kind == "verdict" else SAFE
    out = []
    for v in table["machine_verdict"]:
        if v == NONE or v not in rates:
            out.append(0.5)  # no machine verdict: nothing known, the widest assumption
        else:
            out.append(1 - rates[v] if v == positive else rates[v])
    return np.array(out, dtype=float)


def allocate(table: pd.DataFrame, size: int, method: str, error_rates: dict[str, float] | None,
             kind: str) -> dict[str, int]:
    """Items per stratum for ``size`` items in all (see the module docstring); ``{stratum: n}``."""
    if method not in ALLOCATIONS:
        raise UsageError(f"--allocation {method!r}: choose {' or '.join(ALLOCATIONS)}")
    if size < 1:
        raise UsageError("--size must be 1 or more")
    N = table["population"].to_numpy(dtype=float)
    q = human_shares(table, error_rates, kind)
    weight = np.ones(len(N)) if method == "equal" else N * np.sqrt(q * (1 - q))
    weight = np.where(weight > 0, weight, 1e-9)
    n = np.minimum(np.minimum(MINIMUM, N), np.floor(size / max(len(N), 1)))
    for _ in range(len(N) + 1):  # spread the rest by weight, capped at each stratum's rows
        left = size - n.sum()
        open_ = n < N
        if left <= 1e-9 or not open_.any():
            break
        share = np.where(open_, weight, 0) / np.where(open_, weight, 0).sum()
        n = np.minimum(n + left * share, N)
    whole = np.floor(n)
    extra = int(round(min(size, N.sum()) - whole.sum()))
    order = np.argsort(-(n - whole), kind="stable")
    for i in order[:max(extra, 0)]:
        whole[i] = min(whole[i] + 1, N[i])
    return {s: int(k) for s, k in zip(table["stratum"], whole)}


def _scopes(table: pd.DataFrame, kind: str) -> list[tuple[str, str, np.ndarray]]:
    """(set, model, mask of strata): pooled, then per set (prompt audit) or per set and model."""
    out = [("(all)", "(all)", np.ones(len(table), bool))]
    sets = table["set"].to_numpy()
    models = np.full(len(table), "(all)", dtype=object) if kind == PROMPT else table["model"].to_numpy()
    for set_name, model in sorted(set(zip(sets.tolist(), models.tolist()))):
        out.append((set_name, model, (sets == set_name) & (models == model)))
    return out


def _figure_counts(figure: str, verdict: np.ndarray, n: np.ndarray, x: np.ndarray, kind: str):
    """(strata mask, d, s, (domain_known, value_known)) of one figure from the human positives ``x``
    drawn; the strata are the machine verdict's, as the audit's are."""
    positive = REFUSAL if kind == "verdict" else SAFE
    has = verdict != NONE
    pos = verdict == positive
    if figure in ("human_refusal_share", "human_safe_share"):
        return np.ones(len(verdict), bool), n + 0 * x, x, (True, False)
    if figure == "accuracy":
        return has, n + 0 * x, np.where(pos, x, n - x), (True, False)
    if figure == "precision":
        return has, np.where(pos, n, 0) + 0 * x, np.where(pos, x, 0), (True, False)
    if figure == "recall":
        return has, x, np.where(pos, x, 0), (False, True)
    return has, n - x, np.where(pos, 0, n - x), (False, True)  # specificity


def expected_half_widths(table: pd.DataFrame, sizes: dict[str, int], error_rates: dict[str, float] | None,
                         kind: str, draws: int = DRAWS, seed: int = 0) -> pd.DataFrame:
    """The mean 95% half-width of every figure over ``draws`` simulated audits of this allocation."""
    N = table["population"].to_numpy(dtype=float)
    n = np.array([sizes.get(s, 0) for s in table["stratum"]], dtype=float)
    q = human_shares(table, error_rates, kind)
    good = np.round(q * N).astype(np.int64)
    rng = np.random.default_rng(seed)
    x = rng.hypergeometric(good, (N - good).astype(np.int64), n.astype(np.int64), size=(draws, len(N))).astype(float)
    verdict = table["machine_verdict"].to_numpy()
    rows = []
    for set_name, model, scope in _scopes(table, kind):
        for figure in FIGURES[kind]:
            mask, d, s, known = _figure_counts(figure, verdict, n, x, kind)
            use = scope & mask
            hw = _half_width(N[use], n[use], d[:, use], s[:, use], known) if use.any() else math.nan
            rows.append({"figure": figure, "set": set_name, "model": model, "rows": int(N[use].sum()),
                         "items": int(n[use].sum()), "expected_half_width": hw})
    return pd.DataFrame(rows)


def _half_width(N, n, d, s, known: tuple[bool, bool]) -> float:
    """Mean half-width of the stratified Wilson interval over draws (strata with no item bounded
    in the worst case, as the audit does)."""
    seen = n > 0
    if not seen.any():
        return math.nan
    Nc, nc, dc, sc = N[seen], n[seen], d[:, seen], s[:, seen]
    R, R_adj, var = stats.stratified_core(np.broadcast_to(Nc, dc.shape), np.broadcast_to(nc, dc.shape), dc, sc, *known)
    low, high, _ = stats.wilson_effective(R, R_adj, var)
    uncovered = N[~seen].sum()
    if uncovered:
        total = Nc.sum() + uncovered
        m = uncovered / total
        b = (Nc * np.where(nc > 0, dc / np.maximum(nc, 1), 0)).sum(axis=1) / total
        low, high = low * b / (b + m), (high * b + m) / (b + m)
    width = (high - low) / 2
    width = width[np.isfinite(width)]
    return float(width.mean()) if width.size else math.nan


def size_for_target(table: pd.DataFrame, target: float, method: str, error_rates: dict[str, float] | None,
                    kind: str, draws: int = DRAWS) -> pd.DataFrame:
    """For every figure, the smallest total size whose expected half-width is at most ``target``
    (a bisection over the size; the census of every row is exact, so every target is reachable)."""
    total = int(table["population"].sum())
    cache: dict[int, pd.DataFrame] = {}

    def at(size: int) -> pd.DataFrame:
        if size not in cache:
            cache[size] = expected_half_widths(table, allocate(table, size, method, error_rates, kind),
                                               error_rates, kind, draws)
        return cache[size]

    first = at(min(total, max(len(table), 1)))
    out = []
    for i, r in first.iterrows():
        lo, hi = min(total, max(len(table), 1)), total
        if not r["items"] and not r["rows"]:
            out.append(math.nan)
            continue
        if at(lo).at[i, "expected_half_width"] <= target:
            out.append(lo)
            continue
        while hi - lo > max(1, lo // 50):
            mid = (lo + hi) // 2
            if at(mid).at[i, "expected_half_width"] <= target:
                hi = mid
            else:
                lo = mid
        out.append(hi)
    return first[["figure", "set", "model", "rows"]].assign(size_for_target=out)


# ---------------------------------------------------------------- the command

def allocation_arguments(parser, default: str) -> None:
    """``--allocation`` and ``--error_rate``, shared by ``sample`` and ``plan``."""
    parser.add_argument("--allocation", choices=ALLOCATIONS, default=default,
                        help=f"how --size items are spread over the strata: equal (the same in each) or neyman "
                             f"(more where a stratum is large and its verdict unsure) (default: {default})")
    parser.add_argument("--error_rate", default=None, metavar="RATE",
                        help="assumed error rate of the machine verdict, for neyman and the plan: one number, or "
                             "per verdict, e.g. refusal=0.05,answer=0.15 (default: "
                             + ", ".join(f"{k} {v}" for k, v in DEFAULT_ERROR.items()) + ")")


def plan_arguments(parser) -> None:
    """The options of ``orbench-audit plan``."""
    parser.add_argument("--size", type=int, default=None, metavar="N",
                        help="items in all (default: what 'sample --per_stratum 10' would draw)")
    allocation_arguments(parser, default="neyman")
    parser.add_argument("--target", type=float, default=0.05, metavar="H",
                        help="the 95%% half-width wanted, as a share (default: 0.05, i.e. +-5 points)")
    parser.add_argument("--pilot", default=None, metavar="DIR",
                        help="a scored audit folder of the same kind: its measured error rates replace --error_rate")
    parser.add_argument("--output_dir", default=None, metavar="DIR",
                        help="also write plan.csv (every figure) and allocation.csv (items per stratum) here")


def run(args, pilot_rates: dict[str, float] | None = None) -> int:
    """``orbench-audit plan``: print (and with --output_dir write) the plan; ``pilot_rates``: the
    error rates a scored pilot audit measured (``--pilot``), used instead of ``--error_rate``."""
    from orbench.analysis.audit.sample import assign_strata, collect
    from orbench.run.tables import write_csv_atomic

    if not 0 < args.target < 0.5:
        raise UsageError(f"--target {args.target}: a half-width between 0 and 0.5 (e.g. 0.05)")
    rates = pilot_rates if args.pilot else parse_error_rates(args.error_rate)
    rows, _ = collect(args.files, args.kind, args.default_set)
    table = assign_strata(rows, args.kind)[1]
    size = args.size if args.size is not None else int(np.minimum(table["population"], 10).sum())
    sizes = allocate(table, size, args.allocation, rates, args.kind)
    plan = expected_half_widths(table, sizes, rates, args.kind)
    need = size_for_target(table, args.target, args.allocation, rates, args.kind)
    plan = plan.merge(need, on=["figure", "set", "model", "rows"], how="left")
    used = rates_used(rates, args.kind)
    print(f"{len(table)} strata, {int(table['population'].sum())} rows; {args.allocation} allocation of {size} items "
          f"({min(sizes.values())}-{max(sizes.values())} per stratum); assumed error rates: "
          + ", ".join(f"{k} {v:.3f}" for k, v in used.items()) + (f" (from the pilot {args.pilot})" if args.pilot else ""))
    print(f"{'figure':22s} {'set':12s} {'model':28s} {'items':>6s} {'expected +-':>12s} {'items for +-' + str(args.target):>18s}")
    for r in plan.to_dict("records"):
        need_text = "-" if pd.isna(r["size_for_target"]) else f"{int(r['size_for_target'])}"
        hw = "-" if pd.isna(r["expected_half_width"]) else f"{r['expected_half_width']:.3f}"
        print(f"{r['figure']:22s} {str(r['set'])[:12]:12s} {str(r['model'])[:28]:28s} {r['items']:>6d} {hw:>12s} "
              f"{need_text:>18s}")
    if args.output_dir:
        from pathlib import Path

        out = Path(args.output_dir)
        write_csv_atomic(stats.round_for_csv(plan.assign(allocation=args.allocation, size=size)), out / "plan.csv")
        write_csv_atomic(table.assign(planned=[sizes[s] for s in table["stratum"]]), out / "allocation.csv")
        print(out / "plan.csv")
    return 0
