"""The models the benchmarks time: PyTorch's ``nn.Transformer`` dressed as ours (the peer), the
variants of ours that switch one speed-up off, and the batches they are fed.

The peer gets our scaled embeddings, sinusoidal positions and tied output projection, so that only
the encoder and decoder stacks differ. ``nn.Transformer`` applies dropout in two places the paper
does not (§5.4 puts it on each sub-layer's output and on the embedding sums only): on the attention
weights and on the feed-forward network's hidden activations. Both are extra work, so by default
they are switched off, leaving dropout exactly where ours has it (``paper_dropout=False`` keeps
PyTorch's defaults). Masks are given in each library's sense: ours ``True`` = may attend,
PyTorch's ``True`` = may *not* attend.
"""

import copy

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from transformer_lib.attention import MultiHeadAttention, padding_mask, subsequent_mask
from transformer_lib.batching import Batch
from transformer_lib.model import Embeddings, PositionalEncoding, Transformer, TransformerConfig
from transformer_lib.tokenizer import PAD_ID


class TorchTransformer(nn.Module):
    """``nn.Transformer`` between our embeddings and our tied generator (post-LN, ReLU)."""

    def __init__(self, c: TransformerConfig, paper_dropout: bool = True):
        super().__init__()
        self.config = c
        self.embeddings = Embeddings(c.tgt_vocab_size, c.d_model)  # shared, as in ours (§3.4)
        self.src_positions = PositionalEncoding(c.d_model, c.max_len, c.dropout)
        self.tgt_positions = PositionalEncoding(c.d_model, c.max_len, c.dropout)
        self.stacks = nn.Transformer(
            c.d_model,
            c.n_heads,
            c.n_layers,
            c.n_layers,
            c.d_ff,
            c.dropout,
            activation="relu",
            batch_first=True,
            norm_first=False,
        )
        # nn.Transformer ends each stack with a LayerNorm; the paper's post-LN model has none.
        self.stacks.encoder.norm = nn.Identity()
        self.stacks.decoder.norm = nn.Identity()
        if paper_dropout:  # only on sub-layer outputs, as in ours: not inside attention or FFN
            for layer in [*self.stacks.encoder.layers, *self.stacks.decoder.layers]:
                layer.dropout = nn.Identity()  # between linear1 and linear2
                layer.self_attn.dropout = 0.0  # on the attention weights
                if hasattr(layer, "multihead_attn"):
                    layer.multihead_attn.dropout = 0.0
        self.generator = nn.Linear(c.d_model, c.tgt_vocab_size, bias=False)
        self.generator.weight = self.embeddings.lookup.weight

    def forward(self, src: Tensor, tgt: Tensor, src_mask: Tensor, tgt_mask: Tensor) -> Tensor:
        """Masks in our sense, converted here, at the boundary: PyTorch's True = not allowed."""
        src_pad = ~src_mask[:, 0, 0]  # (B, S)
        causal = ~subsequent_mask(tgt.shape[1], tgt.device)[0, 0]  # (T, T)
        out = self.stacks(
            self.src_positions(self.embeddings(src)),
            self.tgt_positions(self.embeddings(tgt)),
            tgt_mask=causal,
            src_key_padding_mask=src_pad,
            memory_key_padding_mask=src_pad,
            tgt_key_padding_mask=tgt == PAD_ID,
            tgt_is_causal=True,
        )
        return self.generator(out)  # (B, T, V)


def copy_weights(ours: Transformer, theirs: TorchTransformer) -> None:
    """Give ``theirs`` our weights, so that the two compute the same function."""
    theirs.embeddings.load_state_dict(ours.decoder.embeddings.state_dict())
    layers = list(zip(ours.encoder.layers, theirs.stacks.encoder.layers, strict=True))
    layers += list(zip(ours.decoder.layers, theirs.stacks.decoder.layers, strict=True))
    with torch.no_grad():
        for mine, torch_layer in layers:
            attentions = [(mine.self_attn, torch_layer.self_attn)]
            if hasattr(mine, "cross_attn"):
                attentions.append((mine.cross_attn, torch_layer.multihead_attn))
            for a, b in attentions:
                b.in_proj_weight.copy_(a.in_proj.weight)
                b.in_proj_bias.copy_(a.in_proj.bias)
                b.out_proj.load_state_dict(a.out_proj.state_dict())
            torch_layer.linear1.load_state_dict(mine.feed_forward.linear_1.state_dict())
            torch_layer.linear2.load_state_dict(mine.feed_forward.linear_2.state_dict())
            norms = [torch_layer.norm1, torch_layer.norm2, getattr(torch_layer, "norm3", None)]
            for a, b in zip(mine.norms, norms, strict=False):
                b.load_state_dict(a.state_dict())


def largest_difference(ours: nn.Module, theirs: nn.Module, batch: Batch) -> float:
    """The largest difference of the two models' logits on the real (non-pad) target positions,
    without dropout; with gradients on, so that ``nn.Transformer`` takes its training path (in
    inference it turns padded inputs into nested tensors)."""
    was_training = ours.training, theirs.training
    ours.eval(), theirs.eval()
    args = (batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)
    with torch.enable_grad():
        difference = ours(*args).float() - theirs(*args).float()
    ours.train(was_training[0]), theirs.train(was_training[1])
    return difference[batch.tgt_out != PAD_ID].abs().max().item()


class AttentionVariant(nn.Module):
    """Our ``MultiHeadAttention`` with one speed-up switched off, for the table of speed-ups.

    ``separate_projections``: Q of self-attention by one matrix product and K, V by two more,
    instead of one fused product (the library's encoder-decoder path, with the same weights,
    over the sequence itself: ``inner`` is switched to it). ``written_out``: the explanatory
    softmax(QK^T/sqrt(d_k))V of the attention chapter instead of PyTorch's
    ``scaled_dot_product_attention`` kernels.
    """

    def __init__(self, inner: MultiHeadAttention, separate_projections=False, written_out=False):
        super().__init__()
        self.inner, self.written_out = inner, written_out
        self.over_itself = separate_projections and not inner.cross  # self-attention, as cross
        inner.cross = inner.cross or separate_projections

    def forward(self, x, memory=None, mask=None, need_weights=False, cache=None):
        memory = x if self.over_itself else memory
        out = self.inner(x, memory, mask, need_weights or self.written_out, cache)
        return out[0] if self.written_out and not need_weights else out


def variant(model: Transformer, separate_projections=False, written_out=False) -> Transformer:
    """A copy of ``model`` (same weights) whose attention layers are :class:`AttentionVariant`."""
    model = copy.deepcopy(model)
    for layer in [*model.encoder.layers, *model.decoder.layers]:
        for name in ("self_attn", "cross_attn"):
            if hasattr(layer, name):
                wrapped = AttentionVariant(getattr(layer, name), separate_projections, written_out)
                setattr(layer, name, wrapped)
    return model


def random_batch(
    config: TransformerConfig,
    batch_size: int,
    length: int,
    generator: torch.Generator,
    shortest: int | None = None,
) -> Batch:
    """Random tokens of ``batch_size`` pairs; each row has a random length between ``shortest``
    (default: ``length``, no padding) and ``length``, padded to ``length``."""
    shortest = length if shortest is None else shortest
    vocab = min(config.src_vocab_size, config.tgt_vocab_size)

    def padded(lengths: Tensor) -> Tensor:
        tokens = torch.randint(4, vocab, (batch_size, length), generator=generator)
        return tokens.masked_fill(torch.arange(length) >= lengths, PAD_ID)  # (B, L)

    src = padded(torch.randint(shortest, length + 1, (batch_size, 1), generator=generator))
    tgt_lengths = torch.randint(shortest, length + 1, (batch_size, 1), generator=generator)
    tgt_in, tgt_out = padded(tgt_lengths), padded(tgt_lengths)  # padding in the same places
    tgt_mask = padding_mask(tgt_in, PAD_ID) & subsequent_mask(length)  # (B, 1, T, T)
    return Batch(src, tgt_in, tgt_out, padding_mask(src, PAD_ID), tgt_mask)


def pad_to_multiple(batch: Batch, multiple: int) -> Batch:
    """``batch`` with its source and target widths padded up to a multiple of ``multiple``."""

    def widen(tokens: Tensor) -> Tensor:
        return F.pad(tokens, (0, -tokens.shape[1] % multiple), value=PAD_ID)

    src, tgt_in, tgt_out = widen(batch.src), widen(batch.tgt_in), widen(batch.tgt_out)
    tgt_mask = padding_mask(tgt_in, PAD_ID) & subsequent_mask(tgt_in.shape[1], tgt_in.device)
    return Batch(src, tgt_in, tgt_out, padding_mask(src, PAD_ID), tgt_mask)
