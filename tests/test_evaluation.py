"""Checkpoint averaging on hand-made state dicts, and BLEU against sacreBLEU's own program."""

import subprocess
import sys

import pytest
import torch

from transformer_lib.checkpoints import CheckpointError, load_checkpoint, save_checkpoint
from transformer_lib.evaluation import average_checkpoints, average_state_dicts, corpus_scores


def state(value, dtype=torch.float32):
    return {"w": torch.full((3, 2), value, dtype=dtype), "b": torch.arange(2.0) * value}


def test_average_of_equal_state_dicts_is_the_same():
    averaged = average_state_dicts([state(0.3), state(0.3), state(0.3)])
    assert torch.equal(averaged["w"], state(0.3)["w"])
    assert torch.equal(averaged["b"], state(0.3)["b"])


def test_average_of_two_is_the_mean():
    torch.manual_seed(0)
    a = {"w": torch.randn(4, 5), "v": torch.randn(7)}
    b = {"w": torch.randn(4, 5), "v": torch.randn(7)}
    averaged = average_state_dicts([a, b])
    for key in a:
        torch.testing.assert_close(averaged[key], (a[key] + b[key]) / 2)


def test_average_keeps_each_dtype():
    averaged = average_state_dicts([state(1.0, torch.bfloat16), state(2.0, torch.bfloat16)])
    assert averaged["w"].dtype == torch.bfloat16
    assert torch.equal(averaged["w"], torch.full((3, 2), 1.5, dtype=torch.bfloat16))


def test_mismatched_keys_are_refused():
    other = {"w": torch.zeros(3, 2), "c": torch.zeros(2)}
    with pytest.raises(CheckpointError, match="other parameters"):
        average_state_dicts([state(1.0), other])


def test_mismatched_shapes_are_refused_naming_the_tensor():
    other = {"w": torch.zeros(2, 3), "b": torch.zeros(2)}
    with pytest.raises(CheckpointError, match="'w' has shape"):
        average_state_dicts([state(1.0), other])


def test_differing_integer_buffers_are_refused():
    a = {"count": torch.tensor(1)}
    b = {"count": torch.tensor(2)}
    with pytest.raises(CheckpointError, match="not a floating-point"):
        average_state_dicts([a, b])
    assert torch.equal(average_state_dicts([a, a])["count"], a["count"])


def test_nothing_to_average_is_an_error():
    with pytest.raises(ValueError, match="nothing to average"):
        average_state_dicts([])


def test_average_checkpoints_writes_a_loadable_checkpoint(tmp_path):
    paths = []
    for step, value in [(10, 1.0), (20, 2.0), (30, 6.0)]:
        path = tmp_path / f"step-{step}.pt"
        save_checkpoint(
            {"model": state(value), "optimizer": {}, "step": step, "config": {"model": {"d": 1}}},
            path,
        )
        paths.append(path)
    average_checkpoints(paths, out=tmp_path / "avg.pt")
    loaded = load_checkpoint(tmp_path / "avg.pt")
    assert loaded["averaged_steps"] == [10, 20, 30]
    assert loaded["step"] == 30 and "optimizer" not in loaded
    assert torch.equal(loaded["model"]["w"], torch.full((3, 2), 3.0))


def test_average_checkpoints_of_different_models_is_refused(tmp_path):
    for name, d in [("a.pt", 1), ("b.pt", 2)]:
        save_checkpoint(
            {"model": state(1.0), "step": 1, "config": {"model": {"d": d}}}, tmp_path / name
        )
    with pytest.raises(CheckpointError, match="different configurations"):
        average_checkpoints([tmp_path / "a.pt", tmp_path / "b.pt"])


def save_run_checkpoint(path, step, value=1.0, **changes):
    """A checkpoint of run de→en, seed 0, run for 30 steps, with ``changes`` to its settings."""
    run = {"data": "multi30k", "src": "de", "tgt": "en", "profile": "ci"}
    training = {"seed": 0, "max_steps": 30, "label_smoothing": 0.1}
    for name, value_ in changes.items():
        (run if name in run else training)[name] = value_
    config = {"model": {"d": 1}, "training": training, "run": run}
    save_checkpoint({"model": state(value), "step": step, "config": config}, path)
    return path


def test_average_checkpoints_of_one_run_extended_on_resume_is_allowed(tmp_path):
    paths = [save_run_checkpoint(tmp_path / "a.pt", 10), save_run_checkpoint(tmp_path / "b.pt", 40)]
    paths.append(save_run_checkpoint(tmp_path / "c.pt", 50, max_steps=60))  # resumed, longer
    assert average_checkpoints(paths)["averaged_steps"] == [10, 40, 50]


@pytest.mark.parametrize(
    "changes, named",
    [({"seed": 1}, "training.seed"), ({"src": "en", "tgt": "de"}, "run.src, run.tgt")],
)
def test_average_checkpoints_of_different_runs_is_refused_unless_told(tmp_path, changes, named):
    """Another seed or the other direction has the same shapes, and its weights would average
    without an error: refused, naming what differs, unless asked for."""
    paths = [save_run_checkpoint(tmp_path / "a.pt", 10), save_run_checkpoint(tmp_path / "b.pt", 20)]
    paths.append(save_run_checkpoint(tmp_path / "other.pt", 30, **changes))
    with pytest.raises(CheckpointError, match=f"different runs \\({named} differ\\)"):
        average_checkpoints(paths)
    assert average_checkpoints(paths, across_runs=True)["averaged_steps"] == [10, 20, 30]


HYPOTHESES = [
    "A man in a blue shirt is standing on a ladder.",
    "Two young girls are playing in the sand near water.",
    "A dog runs through the grass",
    "",
]
REFERENCES = [
    "A man in a blue shirt is standing on a ladder cleaning windows.",
    "Two young girls play in the sand by the water.",
    "A brown dog is running through the grass.",
    "People are walking down a busy street.",
]


def sacrebleu_program(tmp_path, *options):
    """The score sacreBLEU's own command line prints for the same files."""
    hyp, ref = tmp_path / "hyp.txt", tmp_path / "ref.txt"
    hyp.write_text("\n".join(HYPOTHESES) + "\n")
    ref.write_text("\n".join(REFERENCES) + "\n")
    result = subprocess.run(
        [sys.executable, "-m", "sacrebleu", str(ref), "-i", str(hyp), "-b", "-w", "4", *options],
        capture_output=True,
        text=True,
        check=True,
    )
    return float(result.stdout.strip())


def test_bleu_equals_sacrebleu_program(tmp_path):
    scores = corpus_scores(HYPOTHESES, REFERENCES)
    assert round(scores["bleu"], 4) == sacrebleu_program(tmp_path)
    assert round(scores["chrf"], 4) == sacrebleu_program(tmp_path, "-m", "chrf")
    assert scores["bleu_signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a")


def test_lowercase_bleu_equals_sacrebleu_program(tmp_path):
    scores = corpus_scores(HYPOTHESES, REFERENCES, lowercase=True)
    assert round(scores["bleu"], 4) == sacrebleu_program(tmp_path, "-lc")
    assert "case:lc" in scores["bleu_signature"]


def test_hypothesis_count_must_match():
    with pytest.raises(ValueError, match="3 hypotheses for 4 references"):
        corpus_scores(HYPOTHESES[:3], REFERENCES)


def translation_checkpoint(path, **extra) -> None:
    """A checkpoint that load_translator reads: a tiny model, its config and tokenizer, and
    ``extra`` entries."""
    from transformer_lib.model import Transformer, TransformerConfig
    from transformer_lib.tokenizer import BPETokenizer

    tokenizer = BPETokenizer.train(["ein hund", "a dog"] * 3, 280)
    vocab = tokenizer.vocab_size
    config = TransformerConfig(vocab, vocab, d_model=16, d_ff=32, n_heads=2, n_layers=1)
    checkpoint = {"model": Transformer(config).state_dict(), "step": 1, **extra}
    checkpoint |= {"config": {"model": vars(config)}, "tokenizer": tokenizer.to_json()}
    save_checkpoint(checkpoint, path)


@pytest.mark.parametrize(
    "recorded, expected",
    [
        ({"search": {"beam_size": 2, "alpha": 1.8, "extra_length": 9}}, (2, 1.8, 9)),
        ({}, (4, 0.6, 50)),
    ],
)
def test_load_translator_gives_the_model_the_search_its_checkpoint_records(
    tmp_path, recorded, expected
):
    """train_translation writes the profile's search into every checkpoint; a checkpoint that
    records none is searched with §6.1's settings."""
    from transformer_lib.evaluation import load_translator

    translation_checkpoint(tmp_path / "last.pt", **recorded)
    model, _, _ = load_translator(tmp_path / "last.pt")
    search = model.record.search
    assert (search.beam_size, search.alpha, search.extra_length) == expected


def test_a_checkpoint_with_unreadable_search_settings_is_refused(tmp_path):
    from transformer_lib.evaluation import load_translator

    translation_checkpoint(tmp_path / "last.pt", search={"alpha": -1.0})
    with pytest.raises(CheckpointError, match="search settings"):
        load_translator(tmp_path / "last.pt")


def test_the_paired_bleu_interval_and_p_are_those_of_sacrebleus_resamples():
    """paired_bleu's interval, against BLEU recomputed by sacreBLEU on each resample of the
    sentences (drawn as sacreBLEU draws them), and its p-value against sacreBLEU's own test."""
    import numpy as np
    import sacrebleu

    from transformer_lib.book.significance import paired_bleu

    words = "a dog runs on the grass near two children with a red ball in the park".split()
    rng = np.random.default_rng(0)
    references = [" ".join(rng.choice(words, 8)) for _ in range(40)]

    # two systems: each reference with a few of its words replaced, more often in the first
    def noisy(p: float) -> list[str]:
        return [" ".join(w if rng.random() > p else "x" for w in r.split()) for r in references]

    baseline, system = noisy(0.5), noisy(0.2)
    result = paired_bleu(baseline, system, references, resamples=80)
    draws = np.random.default_rng(12345).choice(40, (80, 40))
    differences = sorted(
        sacrebleu.corpus_bleu([system[i] for i in d], [[references[i] for i in d]]).score
        - sacrebleu.corpus_bleu([baseline[i] for i in d], [[references[i] for i in d]]).score
        for d in draws
    )
    assert result.low == pytest.approx(differences[2], abs=1e-4)  # 80 // 40 cut at each end
    assert result.high == pytest.approx(differences[-3], abs=1e-4)
    assert result.difference == pytest.approx(
        sacrebleu.corpus_bleu(system, [references]).score
        - sacrebleu.corpus_bleu(baseline, [references]).score
    )
    named = [("baseline", baseline), ("system", system)]
    metric = {"BLEU": sacrebleu.BLEU(references=[references])}
    test = sacrebleu.significance.PairedTest(named, metric, None, test_type="bs", n_samples=80)
    assert result.sacrebleu_p == test()[1]["BLEU"][1].p_value
    # The two-sided p: resampled differences, centred on zero, as far from it as the real one.
    centred = [abs(d - sum(differences) / len(differences)) for d in differences]
    far = sum(c >= abs(result.difference) - 1e-9 for c in centred)
    assert result.p_value == pytest.approx((far + 1) / 81)
    assert result.sacrebleu_p <= result.p_value  # sacreBLEU's counts one side only
    swapped = paired_bleu(system, baseline, references, resamples=80)
    assert (swapped.low, swapped.high) == pytest.approx((-result.high, -result.low), abs=1e-4)
