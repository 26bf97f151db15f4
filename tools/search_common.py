"""What the searches in tools/ share: their JSON-lines records, the choice of candidates, a run's
checkpoints, and the validation score of a model a search would stop at.

A run is scored as the recorded runs are evaluated, but on the validation split: the average of
its last checkpoints (§6.1), translated with the paper's search (beam 4, alpha 0.6), cased
sacreBLEU and chrF, beside its validation perplexity (no label smoothing). The test sets are
never looked at.
"""

import json
import math
import re
from pathlib import Path


def read_jsonl(path: Path) -> list[dict]:
    """The records of a JSON-lines file; none if it does not exist yet."""
    return [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []


def selected(only: str | None, candidates: dict) -> list[str]:
    """The candidates named by ``--only`` (comma-separated), or all of them."""
    names = only.split(",") if only else list(candidates)
    unknown = [name for name in names if name not in candidates]
    if unknown:
        raise SystemExit(f"unknown candidates {unknown}: choose from {list(candidates)}")
    return names


def checkpoint_steps(folder: Path) -> list[int]:
    """The updates of the step-N.pt checkpoints in ``folder``, in order (none if it is absent)."""
    found = (re.fullmatch(r"step-(\d+)\.pt", path.name) for path in folder.glob("step-*.pt"))
    return sorted(int(match.group(1)) for match in found if match)


def checkpoint_interval(run: Path) -> int:
    """Updates between the checkpoints of the run folder ``run``."""
    return json.loads((run / "config.json").read_text())["training"]["checkpoint_every"]


def length_ratio(hypotheses: list[str], src: str, tgt: str) -> float:
    """The hypotheses' total length over the references', as BLEU's brevity penalty counts it
    (sacreBLEU's tokens; the references are the validation split's first sentences)."""
    import sacrebleu

    from transformer_lib.data import load_multi30k

    references = [target for _, target in load_multi30k("val", src, tgt)][: len(hypotheses)]
    bleu = sacrebleu.corpus_bleu(hypotheses, [references])
    return bleu.sys_len / bleu.ref_len


def score_average(
    checkpoints: Path,
    end: int,
    average: int,
    interval: int,
    src: str,
    tgt: str,
    device: str = "cpu",
    limit: int | None = None,
    alpha: float = 0.6,
) -> dict:
    """Score the average of ``average`` of the checkpoints in the folder ``checkpoints`` (a run's
    ``checkpoints/``), ``interval`` updates apart and
    ending at update ``end`` (those at or before update 0 left out), on the validation split
    (its first ``limit`` sentences only, for a check of a script), with beam 4 and length penalty
    ``alpha`` (§6.1: 0.6)."""
    from transformer_lib.evaluation import average_checkpoints
    from transformer_lib.model import Transformer, TransformerConfig
    from transformer_lib.tokenizer import BPETokenizer

    wanted = [end - interval * i for i in reversed(range(average))]
    paths = [checkpoints / f"step-{step}.pt" for step in wanted if step > 0]
    averaged = average_checkpoints(paths)
    model = Transformer(TransformerConfig(**averaged["config"]["model"]))
    model.load_state_dict(averaged["model"])
    model.to(device).eval()
    tokenizer = BPETokenizer.from_json(averaged["tokenizer"])
    scores = score_model(model, tokenizer, src, tgt, device, limit, alpha)
    return {"averaged_steps": averaged["averaged_steps"], **scores}


def score_model(
    model, tokenizer, src: str, tgt: str, device: str, limit: int | None, alpha: float
) -> dict:
    """A model's validation scores: beam 4 with length penalty ``alpha`` over the split (or its
    first ``limit`` sentences), cased sacreBLEU and chrF, the length ratio, and the
    perplexity."""
    import torch

    from transformer_lib.batching import encode_pairs, make_batches
    from transformer_lib.data import load_multi30k
    from transformer_lib.decoding import SearchConfig
    from transformer_lib.evaluation import evaluate_split
    from transformer_lib.tokenizer import PAD_ID
    from transformer_lib.training import evaluate_loss

    with torch.inference_mode():
        search = SearchConfig(beam_size=4, alpha=alpha)
        scores, hypotheses = evaluate_split(
            model, tokenizer, "val", src, tgt, search=search, limit=limit
        )
        valid = make_batches(encode_pairs(tokenizer, load_multi30k("val", src, tgt)), 2048)
        loss = evaluate_loss(model, valid, PAD_ID, device=torch.device(device))["loss"]
    return {
        "valid_sentences": scores["sentences"],
        "alpha": alpha,
        "length_ratio": round(length_ratio(hypotheses, src, tgt), 4),
        "valid_bleu": round(scores["bleu"], 2),
        "valid_chrf": round(scores["chrf"], 2),
        "valid_loss": round(loss, 4),
        "valid_ppl": round(math.exp(loss), 3),
    }
