"""What editors and type checkers read of ``transformer_lib`` (PEP 561): the public names,
which the package itself imports lazily on first use, with their types."""

from transformer_lib.attention import (
    MultiHeadAttention,
    padding_mask,
    scaled_dot_product_attention,
    subsequent_mask,
)
from transformer_lib.batching import make_batches
from transformer_lib.checkpoints import load_checkpoint
from transformer_lib.data import load_multi30k
from transformer_lib.decoding import SearchConfig, beam_search, greedy_search, translate
from transformer_lib.errors import TransformerLibError
from transformer_lib.evaluation import average_checkpoints, corpus_scores, evaluate_split
from transformer_lib.marian import save_huggingface
from transformer_lib.model import Transformer, TransformerConfig
from transformer_lib.objective import TrainingConfig
from transformer_lib.pretrained import ModelRecord, load_pretrained, save_pretrained
from transformer_lib.recipe import train_translation
from transformer_lib.tokenizer import BPETokenizer
from transformer_lib.training import RunOptions, Validation, train

__version__: str

__all__ = [
    "BPETokenizer",
    "ModelRecord",
    "MultiHeadAttention",
    "RunOptions",
    "SearchConfig",
    "TrainingConfig",
    "Transformer",
    "TransformerConfig",
    "TransformerLibError",
    "Validation",
    "average_checkpoints",
    "beam_search",
    "corpus_scores",
    "evaluate_split",
    "greedy_search",
    "load_checkpoint",
    "load_multi30k",
    "load_pretrained",
    "make_batches",
    "padding_mask",
    "save_huggingface",
    "save_pretrained",
    "scaled_dot_product_attention",
    "subsequent_mask",
    "train",
    "train_translation",
    "translate",
]
