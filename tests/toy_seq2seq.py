"""A tiny stand-in sequence-to-sequence model and batches for testing the training loop fast.

It has the loop's interface (``model(src, tgt_in, src_mask, tgt_mask) -> (B, T, V)`` logits,
batches with ``.to(device)``) and dropout, so that resuming must restore random state.
"""

from dataclasses import dataclass, replace

import torch
from torch import Tensor, nn

from transformer_lib.attention import padding_mask, subsequent_mask

PAD = 0


@dataclass(frozen=True)
class ToyConfig:
    vocab_size: int = 13
    d_model: int = 8
    dropout: float = 0.1
    pad_id: int = PAD


class ToyModel(nn.Module):
    def __init__(self, dropout: float = 0.1):
        super().__init__()
        self.config = ToyConfig(dropout=dropout)
        self.d_model = self.config.d_model
        self.embed = nn.Embedding(self.config.vocab_size, self.d_model)
        self.dropout = nn.Dropout(dropout)
        self.out = nn.Linear(self.d_model, self.config.vocab_size)

    def forward(self, src, tgt_in, src_mask, tgt_mask):
        real = src_mask[:, 0, 0, :, None].to(self.embed.weight.dtype)  # (B, S, 1)
        context = (self.embed(src) * real).sum(1, keepdim=True) / real.sum(1, keepdim=True)
        return self.out(self.dropout(self.embed(tgt_in) + context))  # (B, T, V)


@dataclass(frozen=True)
class ToyBatch:
    src: Tensor
    tgt_in: Tensor
    tgt_out: Tensor
    src_mask: Tensor
    tgt_mask: Tensor

    def to(self, device):
        return replace(self, **{k: getattr(self, k).to(device) for k in self.__dataclass_fields__})


def make_batch(src: Tensor, tgt: Tensor) -> ToyBatch:
    tgt_in, tgt_out = tgt[:, :-1], tgt[:, 1:]
    causal = subsequent_mask(tgt_in.shape[1])
    return ToyBatch(
        src, tgt_in, tgt_out, padding_mask(src, PAD), padding_mask(tgt_in, PAD) & causal
    )


def toy_batches(epoch: int) -> list[ToyBatch]:
    """Three batches per epoch, a pure function of the epoch (epoch -1: validation)."""
    generator = torch.Generator().manual_seed(1000 + epoch)
    batches = []
    for size in (4, 3, 5):
        src = torch.randint(1, ToyConfig.vocab_size, (size, 6), generator=generator)
        tgt = torch.randint(1, ToyConfig.vocab_size, (size, 7), generator=generator)
        src[0, 4:] = PAD  # some padding, so that masks and ignore_index matter
        tgt[-1, 5:] = PAD
        batches.append(make_batch(src, tgt))
    return batches


def concat(batches: list[ToyBatch]) -> ToyBatch:
    """One batch holding the sentences of several (padded to the longest)."""
    width_src = max(b.src.shape[1] for b in batches)
    width_tgt = max(b.tgt_in.shape[1] for b in batches) + 1

    def pad(x, width):
        return nn.functional.pad(x, (0, width - x.shape[1]), value=PAD)

    src = torch.cat([pad(b.src, width_src) for b in batches])
    tgt = torch.cat([pad(torch.cat([b.tgt_in[:, :1], b.tgt_out], 1), width_tgt) for b in batches])
    return make_batch(src, tgt)
