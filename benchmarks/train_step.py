"""Time one training step (forward, backward, Adam) of our Transformer against PyTorch's
``nn.Transformer`` with the same sizes, on the CPU, in one run; print target tokens/s of each and
the ratio ours / PyTorch's (at least 0.95 is the target).

Both models get the same scaled embeddings, sinusoidal positions and tied output projection (our
``Embeddings`` and ``PositionalEncoding``), the same batch of random tokens with padding, the same
label-smoothed loss and the same optimizer, so the only difference is the encoder and decoder
stacks. ``nn.Transformer`` applies dropout in two places the paper does not (§5.4 puts it on each
sub-layer's output and on the embedding sums only): on the attention weights and on the hidden
activations of the feed-forward network. Both are extra work, so for the comparison they are
switched off, leaving dropout exactly where ours has it; ``nn.Transformer`` as it comes is timed
on a line of its own for reference. Masks are given in each library's sense: ours ``True`` = may
attend, PyTorch's ``True`` = may *not* attend. Before timing, the two are checked to compute the
same function (without dropout, on our weights).

It runs on one thread by default: on a shared two-core machine, a step on two threads waits
whenever either thread is descheduled, and the timings spread over a factor of ten.

Run: ``.venv/bin/python benchmarks/train_step.py [--threads N]`` (``make bench`` runs every
benchmark).
"""

import argparse
import statistics
import time

import torch
from torch import Tensor, nn

from transformer_lib.attention import padding_mask, subsequent_mask
from transformer_lib.data import PAD_ID
from transformer_lib.model import Embeddings, PositionalEncoding, Transformer, TransformerConfig
from transformer_lib.training import label_smoothed_loss, make_optimizer

CONFIG = TransformerConfig(
    src_vocab_size=1000, tgt_vocab_size=1000, d_model=256, d_ff=1024, n_heads=4, n_layers=3
)
BATCH, LENGTH = 32, 32  # sequences per batch, longest sequence (rows are padded to it)
WARMUP, REPEATS = 3, 10  # untimed steps per model, then timed steps per model (interleaved)


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
    for mine, torch_layer in layers:
        attentions = [(mine.self_attn, torch_layer.self_attn)]
        if hasattr(mine, "cross_attn"):
            attentions.append((mine.cross_attn, torch_layer.multihead_attn))
        for a, b in attentions:
            b.in_proj_weight.data.copy_(a.in_proj.weight)
            b.in_proj_bias.data.copy_(a.in_proj.bias)
            b.out_proj.load_state_dict(a.out_proj.state_dict())
        torch_layer.linear1.load_state_dict(mine.feed_forward.linear_1.state_dict())
        torch_layer.linear2.load_state_dict(mine.feed_forward.linear_2.state_dict())
        norms = [torch_layer.norm1, torch_layer.norm2, getattr(torch_layer, "norm3", None)]
        for a, b in zip(mine.norms, norms, strict=False):
            b.load_state_dict(a.state_dict())


def random_batch(generator: torch.Generator) -> tuple[Tensor, ...]:
    """Random tokens, each row padded after a random length between LENGTH / 2 and LENGTH."""
    c = CONFIG

    def padded() -> Tensor:
        tokens = torch.randint(4, c.tgt_vocab_size, (BATCH, LENGTH), generator=generator)
        lengths = torch.randint(LENGTH // 2, LENGTH + 1, (BATCH, 1), generator=generator)
        return tokens.masked_fill(torch.arange(LENGTH) >= lengths, PAD_ID)  # (B, L)

    src, tgt_in, tgt_out = padded(), padded(), padded()
    tgt_out = tgt_out.masked_fill(tgt_in == PAD_ID, PAD_ID)  # padding in the same places
    src_mask = padding_mask(src, PAD_ID)  # (B, 1, 1, S)
    tgt_mask = padding_mask(tgt_in, PAD_ID) & subsequent_mask(LENGTH)  # (B, 1, T, T)
    return src, tgt_in, tgt_out, src_mask, tgt_mask


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=1, help="CPU threads (default: 1)")
    torch.set_num_threads(parser.parse_args().threads)
    torch.manual_seed(0)
    ours = Transformer(CONFIG)
    theirs = TorchTransformer(CONFIG)
    copy_weights(ours, theirs)
    theirs_default = TorchTransformer(CONFIG, paper_dropout=False)
    copy_weights(ours, theirs_default)
    src, tgt_in, tgt_out, src_mask, tgt_mask = random_batch(torch.Generator().manual_seed(0))
    n_tokens = int((tgt_out != PAD_ID).sum())

    # In eval mode without dropout; with gradients on, so that nn.Transformer takes the same path
    # as in training (without them it converts padded inputs to nested tensors).
    ours.eval(), theirs.eval()
    with torch.enable_grad():
        difference = ours(src, tgt_in, src_mask, tgt_mask) - theirs(src, tgt_in, src_mask, tgt_mask)
        real = tgt_out != PAD_ID  # padded positions may differ; nothing reads them
        largest = difference[real].abs().max().item()
    assert largest < 1e-3, f"the two models differ by {largest:.1e}: the comparison is unfair"

    def make_step(model: nn.Module):
        model.train()
        optimizer, scheduler = make_optimizer(model, CONFIG.d_model, warmup_steps=4000)

        def step() -> None:
            logits = model(src, tgt_in, src_mask, tgt_mask)
            loss, tokens = label_smoothed_loss(logits, tgt_out, PAD_ID)
            (loss / tokens).backward()
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)

        return step

    steps = {
        "ours": make_step(ours),
        "nn.Transformer, dropout where ours has it": make_step(theirs),
        "nn.Transformer as it comes (dropout also in attention and FFN)": make_step(theirs_default),
    }
    for step in steps.values():
        for _ in range(WARMUP):
            step()
    times: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(REPEATS):  # interleaved, so that other work on the machine hits both alike
        for name, step in steps.items():
            started = time.perf_counter()
            step()
            times[name].append(time.perf_counter() - started)

    c = CONFIG
    print(
        f"training step, d_model={c.d_model}, h={c.n_heads}, d_ff={c.d_ff}, "
        f"N={c.n_layers}+{c.n_layers}, dropout={c.dropout}, B={BATCH}, L={LENGTH}, "
        f"{n_tokens} target tokens, {torch.get_num_threads()} threads, "
        f"median of {REPEATS} (largest difference of the outputs {largest:.1e})"
    )
    rates = {}
    for name, seconds in times.items():
        median = statistics.median(seconds)
        rates[name] = n_tokens / median
        spread = f"{min(seconds) * 1e3:.0f}-{max(seconds) * 1e3:.0f} ms"
        print(f"  {rates[name]:6,.0f} target tokens/s ({median * 1e3:.0f} ms, {spread})  {name}")
    ratio = rates["ours"] / rates["nn.Transformer, dropout where ours has it"]
    print(f"  ratio ours / nn.Transformer (same dropout): {ratio:.2f}")


if __name__ == "__main__":
    main()
