"""Recompute a shipped model's scores from its weights: every test set of its report translated
again, line by line against the committed hypotheses, and BLEU and chrF against bleu.json.

    python tools/recompute_scores.py                            # every shipped model
    python tools/recompute_scores.py multi30k-de-en-laptop      # one, by name or folder

The model is loaded with ``load_pretrained`` (its files checked against their SHA-256) and
translated with the search settings bleu.json records. Exit status 0 when every line and every
score is equal, 1 otherwise (the differences are printed), 2 on a missing or damaged model.
"""

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def recompute(name: str) -> list[str]:
    """The differences between a shipped model's report and what its weights give now."""
    from transformer_lib.book.report import hypotheses_name
    from transformer_lib.decoding import SearchConfig
    from transformer_lib.evaluation import evaluate_split
    from transformer_lib.pretrained import load_pretrained, model_folder

    folder = model_folder(name)
    model, tokenizer = load_pretrained(folder)
    bleu = json.loads((folder / "bleu.json").read_text())
    extra = int(bleu["max_length"].split()[-1])  # "input + 50"
    search = SearchConfig(bleu["beam_size"], bleu["alpha"], extra)
    problems = []
    for split, recorded in bleu["splits"].items():
        started = time.perf_counter()
        scores, hypotheses = evaluate_split(
            model, tokenizer, split, bleu["src"], bleu["tgt"], search=search, limit=bleu["limit"]
        )
        committed = (folder / hypotheses_name(split, bleu["tgt"])).read_text().splitlines()
        differ = [
            i + 1 for i, (a, b) in enumerate(zip(hypotheses, committed, strict=False)) if a != b
        ]
        if len(hypotheses) != len(committed) or differ:
            problems.append(f"{folder.name} {split}: lines {differ[:10]} differ")
        for key in ("bleu", "chrf"):
            if abs(scores[key] - recorded[key]) > 1e-9:
                problems.append(
                    f"{folder.name} {split}: {key} {scores[key]:.4f}, bleu.json {recorded[key]:.4f}"
                )
        print(
            f"{folder.name} {split}, beam {search.beam_size}, alpha {search.alpha}: "
            f"BLEU {scores['bleu']:.2f} (bleu.json {recorded['bleu']:.2f}), "
            f"{len(hypotheses) - len(differ)}/{len(committed)} lines equal, "
            f"{time.perf_counter() - started:.0f} s",
            flush=True,
        )
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(
        prog="python tools/recompute_scores.py",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("models", nargs="*", help="names or folders (default: every shipped one)")
    args = parser.parse_args()
    from transformer_lib.pretrained import ModelNotFoundError, PretrainedError, available_models

    names = args.models or available_models()
    if not names:
        print("error: no shipped model in results/", file=sys.stderr)
        return 2
    problems = []
    try:
        for name in names:
            problems += recompute(name)
    except (ModelNotFoundError, PretrainedError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    for problem in problems:
        print(problem)
    print("every score recomputed equal" if not problems else f"{len(problems)} differences")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
