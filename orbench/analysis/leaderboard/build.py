"""orbench-leaderboard: a static leaderboard site from many runs (report folders and Every Eval Ever records).

Each PATH is a report folder (``orbench-report``'s output: its report.json, its Every Eval Ever
records and the meta files it cites), an Every Eval Ever record (``.json``, this suite's or another
tool's, e.g. an inspect_ai log converted by EEE's converter; its per-sample JSONL read from beside
it), or a folder of them (searched recursively). The same run read twice (a report folder and its
own records, two reports of one run) is shown once.

The site (``--output_dir``, default ``./leaderboard``) is one folder: ``index.html`` with its CSS,
JavaScript and data beside it (no server, nothing fetched from elsewhere: it opens from disk and
from any static host), the records and meta files behind every entry, copied and linked. Per
entry and prompt set: the rejection rate with its 95% interval (or, with more than 5% of the rows
without a verdict, only its bounds), n, the judge and its card (coverage first, kappa, rate bias)
or "never calibrated", the share of cut-off replies, the date, the settings (system prompt,
temperature, samples) and where it came from; per set, whether each model differs from the next
ranked one (the paired test on the prompts both answered, Holm across the set's adjacent pairs).
An entry is ranked only among the entries measured on the same prompts: the full set (with the
paper's 32 published models, ``--no_published`` leaves them out) or the same sample; each cell
says what it was measured on, and an entry alone on its prompts is not ranked.
The Hard-vs-Toxic plot and the table are interactive (hover, select a model; sort and filter by
set, category, provider, judge and source).

Bad input (a path that does not exist, a file that is neither a report nor a record, a record
without what it needs) stops with one line naming the path, exit 2, and nothing written.
The last line printed is the path of index.html.

Example::

    orbench-leaderboard report_a report_b runs/inspect_eee --output_dir site
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from orbench.analysis.eee.read import read_samples
from orbench.analysis.folders import check_writable, write_error
from orbench.analysis.leaderboard import entries as ent
from orbench.analysis.leaderboard import site
from orbench.analysis.leaderboard.sources import gather
from orbench.llm.errors import UsageError
from orbench.run.cli import ArgumentParser, entry_point


def build(paths: Sequence[str], output_dir: str | Path, *, with_published: bool = True) -> tuple[Path, list[str]]:
    """Read ``paths``, write the site into ``output_dir``; the path of index.html and the notes.
    ``UsageError`` on bad input, before anything is written."""
    runs, notes = gather(list(paths))
    runs, dropped = ent.dedupe(runs)
    entries = ent.merge(runs)
    ent.name(entries)
    per_prompt = {}
    for e in entries:
        tables = {}
        for run in e["runs"]:
            tables.update(read_samples(run))
        per_prompt[e["id"]] = tables
    pub = site.published() if with_published else ([], None)
    for label in site.ORDER:
        full_keys = site.set_prompt_keys(label)
        ent.group_by_prompts(entries, label, per_prompt, full_keys, None if full_keys is None else len(full_keys))
        ent.adjacent(entries, label, per_prompt, pub[0])
    out = Path(output_dir)
    site.clear(out)
    files = {e["id"]: site.copy_files(e, out) for e in entries}
    page = site.write(out, site.data(entries, files, notes + dropped, with_published, pub))
    return page, notes + dropped


def make_parser() -> ArgumentParser:
    doc = __doc__.split("\n\n")
    parser = ArgumentParser(prog="orbench-leaderboard", description="\n\n".join(doc[:4]),
                            epilog="\n\n".join(doc[4:]))
    parser.add_argument("paths", nargs="+", metavar="PATH",
                        help="report folders, Every Eval Ever records (.json) or folders of them")
    parser.add_argument("--output_dir", default="leaderboard", metavar="DIR",
                        help="folder for the site (default: ./leaderboard); its records/ and provenance/ "
                             "sub-folders are rewritten")
    parser.add_argument("--no_published", action="store_true",
                        help="leave the paper's 32 published models out of the plot and the table")
    return parser


@entry_point
def main(argv: Sequence[str] | None = None) -> int:
    """Build the site; exit 0, or 2 with one line on bad input or an output folder that cannot be written."""
    try:
        args = make_parser().parse_args(argv)
        check_writable(args.output_dir)
        page, notes = build(args.paths, args.output_dir, with_published=not args.no_published)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(write_error(exc, args.output_dir), file=sys.stderr)
        return 2
    for note in notes:
        print(note, file=sys.stderr)
    print(page)
    return 0


if __name__ == "__main__":
    sys.exit(main())
