"""The evaluation's two choices, measured on the validation split: which checkpoints to average,
and the length penalty.

The recipe evaluates a run as §6.1 does: the average of its last 5 checkpoints (100 updates
apart for the `laptop` profile), beam 4 and length penalty alpha = 0.6. The paper chose its beam
and alpha "after experimentation on the development set" of its own data (§6.1); this script
makes the same experiment on a finished run of ours. It scores other windows (the last 1, 5, 10
or 20 checkpoints, at the run's own interval and wider ones) at alpha 0.6, and other values of
alpha at the recipe's window, and the wider windows with the larger alphas, each translated with beam 4 over the validation split (cased
sacreBLEU, chrF, the length ratio that BLEU's brevity penalty reads), beside the validation
perplexity (tools/search_common.py). The test sets are never looked at.

The trainer keeps only the last 5 checkpoints of a run, so a run's checkpoints must have been
kept as it trained (for example hard-linked into another folder as they appear):

    python tools/evaluation_choices.py --checkpoints KEPT --src de --tgt en \\
        --out results/evaluation-choices/RUN-de-en.jsonl

Each line of ``--out`` is one choice scored; a choice already in the file is not scored again.
Beside it, ``<out>.manifest.json`` names the code, the machine and the command.
"""

import argparse
import json
import shlex
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))  # its neighbours, when imported rather than run

from search_common import checkpoint_steps, score_average  # noqa: E402 (after the path)

RECIPE = (5, 1, 0.6)  # checkpoints averaged, their spacing in intervals, alpha (§6.1)
# (checkpoints averaged, updates between them as a multiple of the run's interval, alpha)
CHOICES = [
    RECIPE,
    *[(average, every, 0.6) for average, every in [(1, 1), (10, 1), (20, 1), (5, 5), (10, 5)]],
    *[(5, 1, alpha) for alpha in (0.0, 0.3, 0.9, 1.2, 1.5, 1.8, 2.1)],
    # both choices at once: the wider windows with the longer-favouring alphas
    *[(average, 1, alpha) for average in (10, 20) for alpha in (0.9, 1.2, 1.5)],
]


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python tools/evaluation_choices.py",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--checkpoints", type=Path, required=True, help="folder of step-N.pt")
    parser.add_argument("--src", required=True, choices=["de", "en"])
    parser.add_argument("--tgt", required=True, choices=["de", "en"])
    parser.add_argument("--out", type=Path, required=True, help="JSON lines, one a choice")
    parser.add_argument("--limit", type=int, help="validation sentences (checks only)")
    args = parser.parse_args()
    steps = checkpoint_steps(args.checkpoints)
    if len(steps) < 2:
        raise SystemExit(f"{args.checkpoints} holds fewer than 2 step-N.pt checkpoints")
    interval, end = steps[-1] - steps[-2], steps[-1]
    done = set()
    if args.out.is_file():
        done = {(r["average"], r["every"], r["alpha"]) for r in map(json.loads, args.out.open())}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    for average, every, alpha in CHOICES:
        spacing = interval * every
        wanted = {end - spacing * i for i in range(average)}
        if (average, spacing, alpha) in done or not wanted <= set(steps):
            continue  # scored already, or its checkpoints were not kept
        started = time.perf_counter()
        scored = score_average(
            args.checkpoints,
            end,
            average,
            spacing,
            args.src,
            args.tgt,
            limit=args.limit,
            alpha=alpha,
        )
        record = {"average": average, "every": spacing, "end": end, **scored}
        record["recipe"] = (average, every, alpha) == RECIPE
        record["score_s"] = round(time.perf_counter() - started, 1)
        with args.out.open("a") as file:
            file.write(json.dumps(record) + "\n")
        print(json.dumps(record), flush=True)
    from transformer_lib.provenance import environment, write_json

    manifest = {
        **environment("cpu"),
        "src": args.src,
        "tgt": args.tgt,
        "command": shlex.join(["python", "tools/evaluation_choices.py", *sys.argv[1:]]),
        "written": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    write_json(args.out.with_suffix(".manifest.json"), manifest)


if __name__ == "__main__":
    main()
