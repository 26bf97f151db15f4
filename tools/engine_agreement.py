"""Every shipped model's beam search against CTranslate2's, on the whole of test_2016_flickr.

At beam 4 and §6.1's α = 0.6 the two searches' rules differ (*Decoding against an inference
engine* lists them), so their outputs may differ too. For each model folder under results/, this
script translates every test sentence with both, and records how many outputs differ, on how many
of those the engine's output scores higher by our own model and length penalty, and both BLEU
scores, in ``results/engine-agreement/agreement.json`` with its manifest. The tests re-read the
record against the models shipped now, and check the same on the first sentences live.

    python tools/engine_agreement.py          # about two minutes on two cores
"""

import argparse
import json
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
AGREEMENT = ROOT / "results" / "engine-agreement" / "agreement.json"
SPLIT = "test_2016_flickr"
ALPHA = 0.6  # §6.1's, where the chapter compares the two searches


def our_search(model, sources: list[list[int]], search) -> list[list[int]]:
    """The output ids of the decoding chapter's searches for source ids, in one padded batch,
    each sentence with its own limit (input + </s> + extra_length steps), as translate does."""
    from transformer_lib.decoding import SentenceGroupedDecoder, beam_search, greedy_search
    from transformer_lib.tokenizer import BOS_ID, EOS_ID

    src = torch.full((len(sources), max(map(len, sources)) + 1), model.config.pad_id)
    for row, ids in enumerate(sources):
        src[row, : len(ids) + 1] = torch.tensor(ids + [EOS_ID])
    limits = torch.tensor([len(ids) + 1 + search.extra_length for ids in sources])
    limits = limits.clamp(max=model.config.max_len)
    with torch.inference_mode():
        state = SentenceGroupedDecoder(model, src)  # translate's
        if search.beam_size == 1:
            return greedy_search(state, BOS_ID, EOS_ID, limits)
        found = beam_search(state, BOS_ID, EOS_ID, limits, search.beam_size, search.alpha)
        return [hypothesis.tokens for hypothesis in found]


def reference_log_probs(model, sources: list[list[int]], targets: list[list[int]]):
    """Our model's log p(y_t | y_<t, x) of each target token and of the </s> after it."""
    from transformer_lib.tokenizer import BOS_ID, EOS_ID

    found = []
    with torch.inference_mode():
        for src, tgt in zip(sources, targets, strict=True):
            tokens = torch.tensor([tgt + [EOS_ID]])
            inputs = torch.tensor([[BOS_ID] + tgt])
            log_probs = model(torch.tensor([src + [EOS_ID]]), inputs).log_softmax(-1)[0]
            found.append(log_probs.gather(1, tokens.T)[:, 0].tolist())
    return found


def beam_agreement(model, tokenizer, engine, pairs, search) -> dict:
    """Both beam searches on ``pairs`` (source, reference): how many outputs differ, on how many
    of those the engine's scores at least as high by our model and length penalty, both BLEU."""
    from transformer_lib.decoding import length_penalty
    from transformer_lib.evaluation import corpus_scores

    sources = tokenizer.encode_batch([source for source, _ in pairs])
    references = [target for _, target in pairs]
    ours = [ids for i in range(0, len(sources), 100) for ids in our_search(model, sources[i : i + 100], search)]  # fmt: skip
    theirs = engine.search(sources, search)
    differ = [i for i, (a, b) in enumerate(zip(ours, theirs, strict=True)) if a != b]

    def scores(outputs):  # log p(y | x) / lp(|y|), </s> counted, as the beam search ranks
        found = reference_log_probs(model, [sources[i] for i in differ], outputs)
        return [sum(row) / length_penalty(len(row), search.alpha) for row in found]

    mine, other = scores([ours[i] for i in differ]), scores([theirs[i] for i in differ])
    return {
        "sentences": len(sources),
        "differ": len(differ),
        "engine_scores_higher": sum(b >= a - 1e-4 for a, b in zip(mine, other, strict=True)),
        "our_bleu": corpus_scores(tokenizer.decode_batch(ours), references)["bleu"],
        "engine_bleu": corpus_scores(tokenizer.decode_batch(theirs), references)["bleu"],
    }


def model_agreement(name: str, limit: int | None = None) -> dict:
    """:func:`beam_agreement` of the shipped model ``name`` (a folder of results/) on the first
    ``limit`` sentences of the test set (all when None), with the model's SHA-256."""
    from transformer_lib.data import load_multi30k, sha256
    from transformer_lib.decoding import SearchConfig
    from transformer_lib.engine import CTranslate2Translator
    from transformer_lib.pretrained import load_pretrained

    folder = ROOT / "results" / name
    bleu = json.loads((folder / "bleu.json").read_text())
    model, tokenizer = load_pretrained(name)
    torch.set_num_threads(1)
    engine = CTranslate2Translator(model, tokenizer, threads=1)
    pairs = load_multi30k(SPLIT, bleu["src"], bleu["tgt"])[:limit]
    search = SearchConfig(bleu["beam_size"], ALPHA, int(bleu["max_length"].split()[-1]))
    found = beam_agreement(model, tokenizer, engine, pairs, search)
    return {"model_sha256": sha256(folder / "model.safetensors"), "beam_size": search.beam_size,
            "alpha": ALPHA, **found}  # fmt: skip


def main() -> int:
    from transformer_lib.pretrained import available_models
    from transformer_lib.provenance import environment, write_json

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.parse_args()
    started = time.perf_counter()
    models = {name: model_agreement(name) for name in available_models()}
    for name, found in models.items():
        print(f"{name}: {found['differ']} of {found['sentences']} differ; BLEU "
              f"{found['engine_bleu']:.2f} (engine) against {found['our_bleu']:.2f}")  # fmt: skip
    manifest = {**environment(torch.device("cpu")), "command": "python tools/engine_agreement.py",
                "wall_s": round(time.perf_counter() - started, 1)}  # fmt: skip
    write_json(AGREEMENT, {"manifest": manifest, "split": SPLIT, "models": models})
    print(f"wrote {AGREEMENT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
