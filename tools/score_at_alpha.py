"""Score a shipped model's test sets again with another length penalty alpha, every other search
setting as its report's: the column "at alpha = 0.6" of the real run's first table, for a run
whose profile chose another alpha on the validation split.

    python tools/score_at_alpha.py multi30k-de-en --alpha 0.6 \\
        --out results/at-paper-alpha/multi30k-de-en.bleu.json

The file has bleu.json's layout (alpha, beam, averaged steps, and per test set BLEU and chrF with
sacreBLEU's signatures; the lowercased BLEU of test_2016_flickr), the SHA-256 of the weights it
scored, and the hypotheses in a file beside it. ``<out>`` without ``.bleu.json`` plus
``.manifest.json`` names the code, the machine and the command.
"""

import argparse
import dataclasses
import json
import shlex
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def score_at_alpha(name: str, alpha: float, out: Path) -> dict:
    """Translate every test set of ``name``'s report with ``alpha``; write and return the scores."""
    from transformer_lib.book.report import TOKENIZED_SPLIT
    from transformer_lib.data import load_multi30k, sha256
    from transformer_lib.evaluation import corpus_scores, evaluate_split
    from transformer_lib.pretrained import load_pretrained, model_folder
    from transformer_lib.provenance import write_json, write_text_atomically

    folder = model_folder(name)
    model, tokenizer = load_pretrained(folder)  # its files checked against their SHA-256
    report = json.loads((folder / "bleu.json").read_text())
    search = dataclasses.replace(model.record.search, alpha=alpha)  # the report's search but alpha
    keep = ("src", "tgt", "beam_size", "max_length", "averaged_steps", "limit")
    scored = {key: report[key] for key in keep} | {"alpha": alpha, "splits": {}}
    scored["model"] = {"folder": folder.name, "sha256": sha256(folder / "model.safetensors")}
    hypotheses_out = []
    for split in report["splits"]:
        started = time.perf_counter()
        scores, hypotheses = evaluate_split(
            model, tokenizer, split, report["src"], report["tgt"], search=search,
            limit=report["limit"],
        )  # fmt: skip
        keys = ("bleu", "bleu_signature", "chrf", "chrf_signature", "sentences")
        entry = {key: scores[key] for key in keys}
        if split == TOKENIZED_SPLIT:
            pairs = load_multi30k(split, report["src"], report["tgt"])[: report["limit"]]
            lower = corpus_scores(hypotheses, [t for _, t in pairs], lowercase=True)
            entry["lowercase"] = {k: lower[k] for k in ("bleu", "bleu_signature")}
        scored["splits"][split] = entry
        hypotheses_out += [f"{split}\t{line}" for line in hypotheses]
        print(
            f"{folder.name} {split}, beam {search.beam_size}, alpha {alpha:g}: BLEU "
            f"{scores['bleu']:.2f} (at the report's alpha {report['alpha']:g}: "
            f"{report['splits'][split]['bleu']:.2f}), {time.perf_counter() - started:.0f} s",
            flush=True,
        )
    write_json(out, scored)
    stem = str(out).removesuffix(".bleu.json")
    write_text_atomically(Path(stem + ".hyp.tsv"), "".join(x + "\n" for x in hypotheses_out))
    return scored


def main() -> int:
    parser = argparse.ArgumentParser(
        prog="python tools/score_at_alpha.py",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("model", help="a shipped model's name or folder")
    parser.add_argument("--alpha", type=float, required=True, help="the length penalty")
    parser.add_argument("--out", type=Path, required=True, help="the scores, NAME.bleu.json")
    args = parser.parse_args()
    if not args.out.name.endswith(".bleu.json"):
        parser.error(f"--out {args.out}: name the file NAME.bleu.json")
    from transformer_lib.pretrained import PretrainedError
    from transformer_lib.provenance import environment, write_json

    args.out.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    try:
        score_at_alpha(args.model, args.alpha, args.out)
    except PretrainedError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    manifest = {
        **environment("cpu"),
        "command": shlex.join(["python", "tools/score_at_alpha.py", *sys.argv[1:]]),
        "wall_s": round(time.perf_counter() - started, 1),
        "written": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    write_json(Path(str(args.out).removesuffix(".bleu.json") + ".manifest.json"), manifest)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
