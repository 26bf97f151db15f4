"""Greedy and beam search against independent references: replay, exhaustive enumeration."""

import itertools

import pytest
import torch

from transformer_lib.decoding import beam_search, greedy_search

BOS, EOS = 0, 1


def gnmt_penalty(length: int, alpha: float) -> float:
    """Wu et al. (2016), eq. 14, written here independently of the library."""
    return ((5.0 + length) / (5.0 + 1.0)) ** alpha


class ToyState:
    """A tiny random recurrent model: the next token depends on the whole prefix and a per-sentence
    start state (standing in for the source sentence)."""

    def __init__(self, sentences: int, vocab: int = 4, hidden: int = 6, seed: int = 0):
        g = torch.Generator().manual_seed(seed)
        self.embed = torch.randn(vocab, hidden, generator=g, dtype=torch.float64)
        self.recur = torch.randn(hidden, hidden, generator=g, dtype=torch.float64) * 0.6
        self.out = torch.randn(hidden, vocab, generator=g, dtype=torch.float64) * 1.5
        self.start = torch.randn(sentences, hidden, generator=g, dtype=torch.float64)
        self.h = self.start.clone()

    def step(self, tokens):
        self.h = torch.tanh(self.embed[tokens] + self.h @ self.recur)
        return self.h @ self.out

    def select(self, rows):
        self.h = self.h[rows]

    def log_prob(self, sentence: int, outputs: list[int]) -> float:
        """log p(outputs | sentence), replayed one token at a time from the start state."""
        h, total, previous = self.start[sentence], 0.0, BOS
        for token in outputs:
            h = torch.tanh(self.embed[previous] + h @ self.recur)
            total += torch.log_softmax(h @ self.out, dim=-1)[token].item()
            previous = token
        return total


def exhaustive_best(model: ToyState, sentence: int, max_length: int, alpha: float):
    """Score every output the search space holds: tokens that are not </s>, then </s>, or a
    sequence cut at the length limit."""
    vocab = model.embed.shape[0]
    others = [t for t in range(vocab) if t != EOS]
    best = None
    for length in range(1, max_length + 1):
        for prefix in itertools.product(others, repeat=length - 1):
            lasts = range(vocab) if length == max_length else [EOS]
            for last in lasts:
                outputs = [*prefix, last]
                score = model.log_prob(sentence, outputs) / gnmt_penalty(length, alpha)
                kept = outputs[:-1] if last == EOS else outputs
                if best is None or score > best[0]:
                    best = (score, kept)
    return best


@pytest.mark.parametrize("alpha", [0.0, 0.6, 2.0])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_wide_beam_finds_the_exhaustive_optimum(alpha, seed):
    max_lengths = torch.tensor([4, 3, 4, 2])
    model = ToyState(len(max_lengths), seed=seed)
    found = beam_search(model, BOS, EOS, max_lengths, beam_size=4**4, alpha=alpha)
    reference = ToyState(len(max_lengths), seed=seed)
    for sentence, hypothesis in enumerate(found):
        score, tokens = exhaustive_best(reference, sentence, int(max_lengths[sentence]), alpha)
        assert hypothesis.tokens == tokens
        assert hypothesis.score == pytest.approx(score, abs=1e-9)


@pytest.mark.parametrize("seed", range(5))
def test_beam_of_one_is_greedy(seed):
    max_lengths = torch.tensor([6, 3, 8, 5, 1])
    greedy = greedy_search(ToyState(5, vocab=7, seed=seed), BOS, EOS, max_lengths)
    beam = beam_search(ToyState(5, vocab=7, seed=seed), BOS, EOS, max_lengths, beam_size=1)
    assert [h.tokens for h in beam] == greedy


@pytest.mark.parametrize("seed", range(5))
def test_batched_greedy_equals_one_sentence_at_a_time(seed):
    """Dropping finished rows from the state must not change the other sentences."""
    max_lengths = torch.tensor([9, 2, 7, 12, 4, 9])
    batched = greedy_search(ToyState(6, vocab=5, seed=seed), BOS, EOS, max_lengths)
    model = ToyState(6, vocab=5, seed=seed)
    for sentence, outputs in enumerate(batched):
        h, previous, expected = model.start[sentence], BOS, []
        while len(expected) < max_lengths[sentence]:
            h = torch.tanh(model.embed[previous] + h @ model.recur)
            previous = int((h @ model.out).argmax())
            if previous == EOS:
                break
            expected.append(previous)
        assert outputs == expected


@pytest.mark.parametrize("seed", range(4))
def test_scores_are_the_penalised_log_probabilities(seed):
    max_lengths = torch.tensor([10, 10, 10])
    found = beam_search(ToyState(3, vocab=6, seed=seed), BOS, EOS, max_lengths, alpha=0.6)
    reference = ToyState(3, vocab=6, seed=seed)
    for sentence, hypothesis in enumerate(found):
        ended = len(hypothesis.tokens) < max_lengths[sentence]
        outputs = hypothesis.tokens + ([EOS] if ended else [])
        log_prob = reference.log_prob(sentence, outputs)
        assert hypothesis.log_prob == pytest.approx(log_prob, abs=1e-9)
        assert hypothesis.score == pytest.approx(log_prob / gnmt_penalty(len(outputs), 0.6))
        assert len(hypothesis.tokens) <= max_lengths[sentence]


@pytest.mark.parametrize("seed", range(4))
def test_a_larger_alpha_never_prefers_shorter_outputs(seed):
    """Dividing a negative log-probability by ((5+|Y|)/6)^alpha rewards length more as alpha
    grows, so the optimum's length cannot shrink (with a beam wide enough to be exact)."""
    max_lengths = torch.tensor([4, 4, 4])
    lengths = []
    for alpha in [0.0, 0.3, 0.6, 1.0, 2.0, 4.0]:
        found = beam_search(ToyState(3, seed=seed), BOS, EOS, max_lengths, 4**4, alpha)
        lengths.append([len(h.tokens) for h in found])
    for shorter, longer in itertools.pairwise(lengths):
        assert all(a <= b for a, b in zip(shorter, longer, strict=True))


def test_beam_size_must_be_positive():
    with pytest.raises(ValueError, match="beam_size"):
        beam_search(ToyState(1), BOS, EOS, torch.tensor([3]), beam_size=0)
