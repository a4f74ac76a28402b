"""``--estimate``: what a run would send and what it would cost, without sending anything.

Prices are data: ``orbench/data/prices.csv`` (provider, model, input_per_million,
output_per_million, batch_discount, as_of), list prices in US dollars per million tokens;
``batch_discount`` is the fraction taken off with the provider's batch API (0.5 = half price).
``model`` may be ``*`` for every model of a provider. A user's ``--prices`` file with the same
columns overrides and extends the table. A model in neither has no price: the report says
"price unknown" and never guesses.

Token figures are estimates made without a tokenizer: input tokens are the characters of a
request's system and user messages divided by 4, rounded up, per request; output tokens are the
request's ``max_tokens``, an upper bound (replies are usually shorter), so the cost shown is the
most the run can cost at those prices, input estimate included.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from orbench.llm.errors import UsageError
from orbench.llm.models import PROVIDERS

BUILTIN_PRICES = Path(str(resources.files("orbench") / "data" / "prices.csv"))
REQUIRED = ("provider", "model", "input_per_million", "output_per_million")
OPTIONAL = ("batch_discount", "as_of")
CHARS_PER_TOKEN = 4


@dataclass(frozen=True)
class Price:
    """List price of one model in US dollars per million tokens."""

    input_per_million: float
    output_per_million: float
    batch_discount: float | None  # fraction off with the batch API; None = not known
    as_of: str = ""


def load_prices(path: str | Path, what: str = "--prices") -> dict[tuple[str, str], Price]:
    """Read a price table; ``UsageError`` naming the file and line for anything wrong in it."""
    path = Path(path)
    try:
        with open(path, encoding="utf-8-sig", newline="") as handle:
            reader = csv.DictReader(handle)
            header = [h.strip().lower() for h in (reader.fieldnames or [])]
            missing = [c for c in REQUIRED if c not in header]
            if missing:
                raise UsageError(f"{what} {path}: no column {', '.join(missing)} (a price file has the "
                                 f"columns {', '.join(REQUIRED + OPTIONAL)})")
            reader.fieldnames = header
            table: dict[tuple[str, str], Price] = {}
            lines: dict[tuple[str, str], int] = {}
            for row in reader:
                line = reader.line_num
                if not any((v or "").strip() for v in row.values() if isinstance(v, str)):
                    continue
                key, price = _parse_row(row, f"{what} {path}, line {line}")
                if key in lines:
                    raise UsageError(f"{what} {path}, line {line}: {key[0]}/{key[1]} is listed twice "
                                     f"(also on line {lines[key]})")
                table[key], lines[key] = price, line
    except OSError as exc:
        raise UsageError(f"{what} {path}: cannot read it ({exc.strerror or exc})") from None
    except (UnicodeDecodeError, csv.Error) as exc:
        raise UsageError(f"{what} {path}: not a readable CSV file ({exc})") from None
    return table


def _parse_row(row: dict, where: str) -> tuple[tuple[str, str], Price]:
    provider = (row.get("provider") or "").strip().lower()
    model = (row.get("model") or "").strip()
    if provider not in PROVIDERS:
        raise UsageError(f"{where}: unknown provider {provider!r} (one of: {', '.join(PROVIDERS)})")
    if not model:
        raise UsageError(f"{where}: empty model (write a model id, or * for every model of {provider})")

    def number(column: str, *, required: bool, most: float | None = None) -> float | None:
        text = (row.get(column) or "").strip()
        if not text:
            if required:
                raise UsageError(f"{where}: {column} is empty")
            return None
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or value < 0 or (most is not None and value > most):
            bound = f"from 0 to {most:g}" if most is not None else ">= 0"
            raise UsageError(f"{where}: {column} must be a number {bound}, got {text!r}")
        return value

    price = Price(number("input_per_million", required=True),
                  number("output_per_million", required=True),
                  number("batch_discount", required=False, most=1.0),
                  (row.get("as_of") or "").strip())
    return (provider, model.lower()), price


def price_table(prices_file: str | Path | None = None) -> dict[tuple[str, str], Price]:
    """The built-in table, overridden and extended by ``prices_file``."""
    table = load_prices(BUILTIN_PRICES, what="built-in price table")
    if prices_file is not None:
        table.update(load_prices(prices_file))
    return table


def price_for(table: dict[tuple[str, str], Price], provider: str, model: str) -> Price | None:
    """The price of ``provider/model``: an exact row, else the provider's ``*`` row, else None."""
    return table.get((provider, model.lower())) or table.get((provider, "*"))


def input_tokens(request) -> int:
    """Estimated input tokens of one request: characters of its messages / 4, rounded up."""
    chars = len(request.system or "") + sum(len(content) for _, content in request.messages)
    return math.ceil(chars / CHARS_PER_TOKEN)


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def _money(value: float) -> str:
    return f"${value:,.4f}"


def _per_model(requests: Sequence) -> dict[str, dict]:
    """Requests, estimated input tokens and max output tokens per model, in first-seen order."""
    per_model: dict[str, dict] = {}
    for request, _key in requests:
        spec = request.model
        entry = per_model.setdefault(str(spec), {"spec": spec, "requests": 0, "in": 0, "out": 0})
        entry["requests"] += 1
        entry["in"] += input_tokens(request)
        entry["out"] += request.max_tokens
    return per_model


def _table(per_model: dict[str, dict], table: dict, batch: bool) -> tuple[list[tuple[str, ...]], list[str]]:
    """The estimate's body rows (one per model, then the total) and the models with no price."""
    body: list[tuple[str, ...]] = []
    total_cost, unknown = 0.0, []
    totals = {"requests": 0, "in": 0, "out": 0}
    for name, entry in per_model.items():
        for k in totals:
            totals[k] += entry[k]
        counts = (name, f"{entry['requests']:,}", f"{entry['in']:,}", f"{entry['out']:,}")
        spec = entry["spec"]
        price = price_for(table, spec.provider.name, spec.model)
        factor = 1.0
        if price is not None and batch and (price.input_per_million or price.output_per_million):
            factor = None if price.batch_discount is None else 1.0 - price.batch_discount
        if price is None or factor is None:
            unknown.append(name)
            why = "price unknown" if price is None else "batch price unknown"
            body.append(counts + (why, "", "", "", ""))
            continue
        per_in, per_out = price.input_per_million * factor, price.output_per_million * factor
        cost_in, cost_out = entry["in"] * per_in / 1e6, entry["out"] * per_out / 1e6
        total_cost += cost_in + cost_out
        body.append(counts + (f"{per_in:g}", f"{per_out:g}", _money(cost_in), _money(cost_out),
                              _money(cost_in + cost_out)))
    total = _money(total_cost) + (f" + price unknown for {len(unknown)} model"
                                  f"{'s' if len(unknown) > 1 else ''}" if unknown else "")
    body.append(("total", f"{totals['requests']:,}", f"{totals['in']:,}", f"{totals['out']:,}",
                 "", "", "", "", total))
    return body, unknown


def estimate_text(requests: Sequence, *, rows: int, batch: bool = False,
                  prices_file: str | Path | None = None) -> str:
    """The ``--estimate`` report for ``requests`` (``(request, cache key)`` pairs); sends nothing."""
    table = price_table(prices_file)
    per_model = _per_model(requests)
    mode = "batch API" if batch else "synchronous API"
    lines = [f"estimate ({mode}; nothing was sent): {_count(rows, 'row')} to do, "
             f"{_count(len(requests), 'request')} to send (rows already done and answers already in "
             f"the cache are not counted)"]
    if not requests:
        return "\n".join(lines)
    header = ("model", "requests", "input tokens", "output tokens (max)", "$/M in", "$/M out",
              "input cost", "output cost (max)", "total (max)")
    body, unknown = _table(per_model, table, batch)
    widths = [max(len(r[i]) for r in [header, *body]) for i in range(len(header))]
    for row in [header, *body]:
        cells = [row[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(row[1:], widths[1:])]
        lines.append("  ".join(cells).rstrip())
    lines.append(f"input tokens: characters of the system and user messages / {CHARS_PER_TOKEN}, rounded "
                 f"up per request (an estimate; the provider's tokenizer decides the bill)")
    lines.append("output tokens: each request's max_tokens, an upper bound (replies are usually shorter)")
    source = "built-in price table" + (f" overridden by {prices_file}" if prices_file else "")
    dated = sorted({p.as_of for name, e in per_model.items()
                    if (p := price_for(table, e["spec"].provider.name, e["spec"].model)) and p.as_of})
    if dated:
        source += f" (as of {', '.join(dated)})"
    lines.append(f"prices: US dollars per million tokens, {source}"
                 + ("; batch discount applied" if batch else ""))
    if unknown:
        lines.append(f"price unknown for {', '.join(unknown)}: add a row to a --prices file "
                     f"(provider,model,input_per_million,output_per_million,batch_discount)")
    return "\n".join(lines)
