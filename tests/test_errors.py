"""One error contract: every mistake a user can make with their input, given to a public
constructor or entry point, ends in a subclass of the library's base error (and of the built-in
an existing ``except`` clause expects), with a message that names what to change."""

import pytest
import torch

from transformer_lib import (
    BPETokenizer,
    MultiHeadAttention,
    SearchConfig,
    TrainingConfig,
    Transformer,
    TransformerConfig,
    average_checkpoints,
    beam_search,
    corpus_scores,
    load_checkpoint,
    load_multi30k,
    load_pretrained,
)
from transformer_lib.checkpoints import CheckpointError
from transformer_lib.data import DataNotFoundError, read_lines
from transformer_lib.errors import ConfigError, MissingFileError, TransformerLibError
from transformer_lib.packing import check_fast_paths
from transformer_lib.pretrained import ModelNotFoundError

SMALL = dict(src_vocab_size=16, tgt_vocab_size=16, d_model=8, d_ff=16, n_heads=2, n_layers=1)


def too_long_for_the_model():
    model = Transformer(TransformerConfig(**SMALL, max_len=4))
    model(torch.ones(1, 9, dtype=torch.long), torch.ones(1, 2, dtype=torch.long))


# (what the user did, the call, the class it must raise, the built-in it must also be, words
# the message must hold: the name of what to change, and how)
MISTAKES = [
    ("a width of 0", lambda: TransformerConfig(**{**SMALL, "d_model": 0}), ConfigError,
     ValueError, ["d_model", "positive"]),
    ("heads that do not divide the width", lambda: TransformerConfig(**{**SMALL, "n_heads": 3}),
     ConfigError, ValueError, ["d_model", "n_heads", "divisible"]),
    ("an unknown kind of positions", lambda: TransformerConfig(**SMALL, positional="rotary"),
     ConfigError, ValueError, ["positional", "sinusoidal"]),
    ("a dropout of 1", lambda: TransformerConfig(**SMALL, dropout=1.0), ConfigError, ValueError,
     ["dropout", "[0, 1)"]),
    ("a padding id outside the vocabulary", lambda: TransformerConfig(**SMALL, pad_id=16),
     ConfigError, ValueError, ["pad_id", "below 16"]),
    ("heads that do not divide the attention's width", lambda: MultiHeadAttention(10, 3),
     ConfigError, ValueError, ["d_model", "n_heads"]),
    ("a sequence longer than the model's positions", too_long_for_the_model, ConfigError,
     ValueError, ["max_len", "shorten the input"]),
    ("no batch an update", lambda: TrainingConfig(accumulation=0), ConfigError, ValueError,
     ["accumulation", "at least 1"]),
    ("a warm-up of 0", lambda: TrainingConfig(warmup_steps=0), ConfigError, ValueError,
     ["warmup_steps", "at least 1"]),
    ("label smoothing of 1", lambda: TrainingConfig(label_smoothing=1.0), ConfigError, ValueError,
     ["label_smoothing", "[0, 1)"]),
    ("a cool-down longer than the run",
     lambda: TrainingConfig(max_steps=10, cooldown_steps=11), ConfigError, ValueError,
     ["cooldown_steps=11", "1..max_steps (10)", "shorten it"]),
    ("a compile mode that does not exist",
     lambda: check_fast_paths(TrainingConfig(compile="fast"), None, None),
     ConfigError, ValueError, ["compile='fast'", "choose None"]),
    ("a beam of 0", lambda: SearchConfig(beam_size=0), ConfigError, ValueError,
     ["beam_size", "at least 1"]),
    ("a batch of 0 sentences", lambda: SearchConfig(batch_size=0), ConfigError, ValueError,
     ["batch_size", "at least 1"]),
    ("a negative length penalty", lambda: SearchConfig(alpha=-0.5), ConfigError, ValueError,
     ["alpha", "at least 0"]),
    ("a beam of 0 given to the search itself",
     lambda: beam_search(None, 1, 2, torch.tensor([5]), beam_size=0), ConfigError, ValueError,
     ["beam_size"]),
    ("fewer translations than references", lambda: corpus_scores(["a"], ["a", "b"]), ConfigError,
     ValueError, ["1 hypotheses for 2 references", "exactly one hypothesis"]),
    ("no checkpoint to average", lambda: average_checkpoints([], out="x.pt"), CheckpointError,
     ValueError, ["nothing to average", "at least one"]),
    ("a checkpoint that is not there", lambda: load_checkpoint("no/such/step-1.pt"),
     MissingFileError, FileNotFoundError, ["no/such/step-1.pt"]),
    ("a tokenizer file that is not there", lambda: BPETokenizer.load("no/such/tokenizer.json"),
     MissingFileError, FileNotFoundError, ["no/such/tokenizer.json", "save()"]),
    ("a text file that is not there", lambda: read_lines("no/such/file.txt"), MissingFileError,
     FileNotFoundError, ["no/such/file.txt", "check the path"]),
    ("a model name that is not shipped", lambda: load_pretrained("multi30k-xx-yy"),
     ModelNotFoundError, FileNotFoundError, ["multi30k-xx-yy"]),
    ("a data folder without Multi30k", lambda: load_multi30k("val", "de", "en", "no/such/dir"),
     DataNotFoundError, FileNotFoundError, ["no/such/dir"]),
]  # fmt: skip


@pytest.mark.parametrize("mistake", MISTAKES, ids=[m[0] for m in MISTAKES])
def test_a_users_mistake_is_the_librarys_error_and_says_what_to_change(mistake):
    _, call, kind, builtin, words = mistake
    with pytest.raises(TransformerLibError) as caught:
        call()
    assert isinstance(caught.value, kind) and isinstance(caught.value, builtin), type(caught.value)
    message = str(caught.value)
    assert all(word in message for word in words), message


def test_every_error_class_of_the_library_is_one_a_user_can_catch_as_one():
    """Every exception class the library defines derives from its base error."""
    import importlib
    import pkgutil

    import transformer_lib

    for info in pkgutil.iter_modules(transformer_lib.__path__):
        if info.name in ("__main__", "book"):
            continue
        module = importlib.import_module(f"transformer_lib.{info.name}")
        for name, value in vars(module).items():
            if (
                isinstance(value, type)
                and issubclass(value, Exception)
                and value.__module__ == module.__name__
            ):
                assert issubclass(value, TransformerLibError), f"{module.__name__}.{name}"
