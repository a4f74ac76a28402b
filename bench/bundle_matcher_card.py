"""Regenerate the keyword matcher's own XSTest judge cards shipped with the package.

Runs the real calibration (``orbench-calibrate --check_model keyword``) on XSTest v2's 2,250
human-labelled responses, with the keyword rules as they are now, and writes each card (one per
keyword family: the rules that decided its rows) into ``orbench/data/judge_cards/<fingerprint>/``,
replacing the bundled cards there. Run it after any change to the keyword rules: the test
``tests/test_bundled_cards.py`` fails while the bundled cards' fingerprints are not the shipped
matcher's. Only the cards' figures ship; XSTest's completions do not (the providers' licences).

Usage::

    python bench/bundle_matcher_card.py [--xstest_dir ../shared/data/xstest-v2]

Exit status: 0 cards written; 2 bad input (no XSTest folder).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from orbench.analysis.calibration import calibrate  # noqa: E402 (needs the sys.path set-up above)
from orbench.analysis.calibration.label_sources import XSTEST_URL  # noqa: E402 (as above)
from orbench.scoring.judge_cards import bundled_dir  # noqa: E402 (as above)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--xstest_dir", default=str(ROOT.parent / "shared" / "data" / "xstest-v2"),
                        help="the folder of XSTest v2's five completion files (default: ../shared/data/xstest-v2)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["ORBENCH_CACHE_DIR"] = str(Path(tmp) / "cache")  # no card store of the user's is touched
        out = Path(tmp) / "calibration"
        code = calibrate.main(["--check_model", "keyword", "--xstest_dir", args.xstest_dir, "--output_dir", str(out)])
        if code != 0:
            return code
        cards = [json.loads(p.read_text(encoding="utf-8")) for p in sorted(out.glob("judge_card_*.json"))]
    target = bundled_dir()
    shutil.rmtree(target, ignore_errors=True)
    for card in cards:
        # nothing of this machine: where the calibration ran and where XSTest was read from
        card["calibration_output"] = None
        card["labels"]["origin"] = XSTEST_URL
        card["bundled"] = True
        path = target / card["judge_fingerprint"] / "XSTest_v2.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(card, indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")
        print(f"{path.relative_to(ROOT)}: keyword family {card['family']}, rules "
              f"{card['judge']['identity']['rules']}, n={card['pooled']['n']}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
