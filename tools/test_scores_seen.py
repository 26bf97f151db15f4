"""Every test-set score of the recorded runs that was seen, and every change of a target, in order.

A choice made after a test score was seen is no longer made on validation data alone. This script
reads the repository's history: each committed version of a recorded run's ``bleu.json``
(``results/multi30k-*/``) with its test_2016_flickr BLEU and α, and each commit that changed a
target of ``TARGETS`` (the BLEU each run set out to reach), and writes them, oldest first, into
``results/test-scores-seen.json``, which *The real run: the record* shows and
``tests/test_real_run.py`` re-creates.

    python tools/test_scores_seen.py          # write results/test-scores-seen.json
    python tools/test_scores_seen.py --check  # exit 1 when the file is not what history says
"""

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "results" / "test-scores-seen.json"
SPLIT = "test_2016_flickr"
RUNS = ("multi30k-de-en-laptop", "multi30k-en-de-laptop", "multi30k-de-en", "multi30k-en-de")
# A target as the book's code wrote it: ("laptop", "de", "en"): 41, or TARGETS[("full", "en", "de")] = 40
TARGET = re.compile(r'\("(laptop|full)", "(de|en)", "(en|de)"\)\]?:? ?=? ?(\d+)')


def git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout


def scores() -> list[dict]:
    """Each committed version of each recorded run's test score, with its commit's date and subject."""
    found = []
    for run in RUNS:
        path = f"results/{run}/bleu.json"
        for line in git("log", "--format=%H %aI %s", "--", path).splitlines():
            commit, date, subject = line.split(" ", 2)
            bleu = json.loads(git("show", f"{commit}:{path}"))
            score = round(bleu["splits"][SPLIT]["bleu"], 2)
            found.append({"date": date, "commit": commit[:10], "run": run, "bleu": score,
                          "alpha": bleu["alpha"], "subject": subject})  # fmt: skip
    return found


def target_changes() -> list[dict]:
    """Each commit that set a target or changed one (a target moved between files is no change)."""
    pattern = '"(laptop|full)", "(de|en)", "(en|de)"'
    log = git("log", "--reverse", "--format=@@@ %H %aI %s", "-p", "-G", pattern, "--", "book/")
    current, changes = {}, []
    for commit_text in log.split("@@@ ")[1:]:
        head, *lines = commit_text.split("\n")
        commit, date, subject = head.split(" ", 2)
        added = {}
        for line in (line for line in lines if line.startswith("+")):
            for profile, src, tgt, value in TARGET.findall(line):
                added[f"{profile} {src}-{tgt}"] = int(value)
        changed = {k: [current.get(k), v] for k, v in added.items() if current.get(k) != v}
        if changed:
            changes.append({"date": date, "commit": commit[:10], "targets": changed,
                            "subject": subject})  # fmt: skip
        current |= added
    return changes


def record() -> dict:
    events = [{"kind": "score", **s} for s in scores()]
    events += [{"kind": "target", **t} for t in target_changes()]
    return {"split": SPLIT, "written_by": "tools/test_scores_seen.py",
            "seen": sorted(events, key=lambda e: (e["date"], e["kind"]))}  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="compare with the written file")
    args = parser.parse_args()
    text = json.dumps(record(), indent=1, ensure_ascii=False) + "\n"
    if args.check:
        same = OUT.is_file() and OUT.read_text(encoding="utf-8") == text
        print(f"{OUT.name} {'agrees with' if same else 'differs from'} the repository's history")
        return 0 if same else 1
    OUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
