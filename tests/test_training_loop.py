"""The training chapter's loop (Part I, ``training_updates``) makes the updates of Part II's
``train``: the same weights, bit for bit, and the same rates and losses as its log."""

import json

import pytest
import torch
from toy_seq2seq import toy_batches

from transformer_lib.model import Transformer, TransformerConfig
from transformer_lib.objective import TrainingConfig, training_updates
from transformer_lib.training import RunOptions, train

STEPS = 5  # toy_batches has three batches an epoch: the updates run into a second epoch
SETTINGS = {  # beside TrainingConfig's defaults, the options the loop passes on
    "defaults": {},
    "accumulation, clipping, cooldown": {
        "accumulation": 2,
        "clip_grad_norm": 0.5,
        "cooldown_steps": 3,
        "label_smoothing": 0.2,
    },
}


def tiny_transformer() -> Transformer:
    torch.manual_seed(0)  # the same initial weights for both loops
    config = TransformerConfig(13, 13, d_model=16, d_ff=32, n_heads=2, n_layers=1, dropout=0.1)
    return Transformer(config)


@pytest.mark.parametrize("settings", SETTINGS.values(), ids=SETTINGS)
def test_the_loop_of_part_one_makes_the_updates_of_train(tmp_path, settings):
    # Another seed than the initial weights': each loop must seed the dropout masks itself.
    config = TrainingConfig(max_steps=STEPS, warmup_steps=2, log_every=1, seed=7, **settings)
    assert config.products is None and config.packing is None and config.compile is None
    part_one = tiny_transformer()
    records = list(training_updates(part_one, toy_batches, config))
    part_two = tiny_transformer()
    options = RunOptions(device="cpu", progress=False)
    train(part_two, toy_batches, config, tmp_path, options=options)

    weights, trained, initial = (m.state_dict() for m in (part_one, part_two, tiny_transformer()))
    assert weights.keys() == trained.keys()
    for name in weights:
        assert torch.equal(weights[name], trained[name]), name
    assert not all(torch.equal(weights[name], initial[name]) for name in weights)  # it trained

    logged = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    fields = ("step", "lr", "loss", "nll")
    assert [[r[f] for f in fields] for r in records] == [
        [r[f] for f in fields] for r in logged if r["kind"] == "train"
    ]
    assert [r["step"] for r in records] == list(range(1, STEPS + 1))


def test_the_loop_can_be_evaluated_between_updates():
    """An evaluation in eval mode between two updates leaves dropout on for the next."""
    model = tiny_transformer()
    for record in training_updates(model, toy_batches, TrainingConfig(max_steps=2)):
        assert model.training, record
        model.eval()
