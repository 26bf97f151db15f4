"""Greedy and beam search against independent references: replay, exhaustive enumeration."""

import itertools

import pytest
import torch

from transformer_lib.decoding import beam_search, best_candidates, greedy_search, most_probable

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


class CountingState(ToyState):
    """ToyState that never gives </s> (each sentence stops at its limit) and records the rows of
    the state before each select and the rows it keeps."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.selects: list[tuple[int, int]] = []

    def step(self, tokens):
        logits = super().step(tokens)
        logits[:, EOS] = float("-inf")
        return logits

    def select(self, rows):
        self.selects.append((len(self.h), len(rows)))
        super().select(rows)


def test_greedy_drops_finished_rows_once_they_are_a_quarter_of_the_state():
    """Sentences finish one at a time (their limits 1..12): each drop removes at least a
    quarter of the rows, and the last one empties the state."""
    max_lengths = torch.arange(1, 13)
    state = CountingState(12, vocab=5, seed=0)
    outputs = greedy_search(state, BOS, EOS, max_lengths)
    assert [len(tokens) for tokens in outputs] == max_lengths.tolist()
    assert state.selects and state.selects[-1][1] == 0
    assert all(before - after >= before / 4 for before, after in state.selects)
    assert len(state.selects) < 12  # not one select per finished sentence


class EndingState(ToyState):
    """ToyState whose first sentence all but certainly writes </s> at every step and whose
    others never do; it records the rows of the state at each step."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.sentence = torch.arange(len(self.h))  # (rows,) the sentence of each row
        self.rows: list[int] = []

    def step(self, tokens):
        self.rows.append(len(tokens))
        logits = super().step(tokens)
        first = self.sentence == 0
        logits[first, EOS], logits[~first, EOS] = 50.0, float("-inf")
        return logits

    def select(self, rows):
        super().select(rows)
        self.sentence = self.sentence[rows]


def test_beam_search_stops_stepping_a_sentence_once_it_has_k_endings():
    """The first sentence ends once at the first step (one beam) and k times at the second:
    from the third step on, its k rows leave the state, long before its length limit."""
    k, n, limit = 3, 4, 8
    state = EndingState(n, vocab=7, seed=0)
    found = beam_search(state, BOS, EOS, torch.full((n,), limit), beam_size=k)
    assert found[0].tokens == [] and all(len(h.tokens) == limit for h in found[1:])
    assert state.rows == [n, n * k] + [(n - 1) * k] * (limit - 2)


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


@pytest.mark.parametrize("width", [7, 64 * 8, 64 * 8 + 1, 4000, 16000, 16001])
@pytest.mark.parametrize("n", [1, 8])
def test_best_candidates_is_topk(width, n):
    """The top n found among the best blocks' numbers are torch.topk's: the same numbers at the
    same places, best first, also where a row holds -inf and where the best crowd one block."""
    generator = torch.Generator().manual_seed(width + n)
    candidates = torch.randperm(5 * width, generator=generator).float().view(5, width)
    candidates[0, : width // 2] = -torch.inf  # half a row impossible
    candidates[1, :n] += 10 * width  # a row's best all in its first block
    top, index = best_candidates(candidates, min(n, width))
    expected_top, expected_index = candidates.topk(min(n, width), dim=1)
    assert torch.equal(top, expected_top) and torch.equal(index, expected_index)


def test_beam_size_must_be_positive():
    with pytest.raises(ValueError, match="beam_size"):
        beam_search(ToyState(1), BOS, EOS, torch.tensor([3]), beam_size=0)


# --- The model as a decoder state: incremental decoding against re-running the decoder.

from transformer_lib.attention import padding_mask  # noqa: E402
from transformer_lib.decoding import (  # noqa: E402
    IncrementalDecoder,
    RerunDecoder,
    SentenceGroupedDecoder,
)
from transformer_lib.model import Transformer, TransformerConfig  # noqa: E402
from transformer_lib.tokenizer import BOS_ID, EOS_ID  # noqa: E402


def random_model(seed: int, **changes) -> Transformer:
    torch.manual_seed(seed)
    settings = dict(src_vocab_size=23, tgt_vocab_size=23, d_model=16, d_ff=32, n_heads=4)
    model = Transformer(TransformerConfig(n_layers=2, dropout=0.0, **{**settings, **changes}))
    return model.eval()


def padded_sources(seed: int, lengths=(7, 3, 5, 1)) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    src = torch.zeros(len(lengths), max(lengths), dtype=torch.long)
    for row, length in enumerate(lengths):
        src[row, :length] = torch.randint(3, 23, (length,), generator=g)
    return src


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"norm_first": True},
        {"positional": "learned"},
        {"tie_embeddings": False},
        {"key_size": 3},  # Table 3, row B
        {"feed_forward": False},  # the ablation without feed-forward sub-layers
    ],
    ids=["post-LN", "pre-LN", "learned", "untied", "narrow-keys", "no-ffn"],
)
@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("state", [IncrementalDecoder, SentenceGroupedDecoder])
def test_incremental_logits_equal_rerunning_the_decoder(state, changes, seed):
    """Beam search's rows (k a sentence, grouped), then rows reordered, repeated and dropped,
    a whole sentence with them: the encoder side read in place, then by index."""
    model = random_model(seed, **changes)
    src = padded_sources(seed)
    g = torch.Generator().manual_seed(seed + 10)
    selections = {1: torch.arange(4).repeat_interleave(2), 4: torch.tensor([5, 0, 1, 7, 7])}
    rows = len(src)
    with torch.no_grad():
        fast, slow = state(model, src), RerunDecoder(model, src)
        tokens = torch.full((rows,), BOS_ID, dtype=torch.long)
        for step in range(9):
            a, b = fast.step(tokens), slow.step(tokens)
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
            if step in selections:
                fast.select(selections[step])
                slow.select(selections[step])
                if state is SentenceGroupedDecoder:  # sentence 1 has no row left at step 4
                    assert fast.cache.side.grouped == (step == 1)
                    assert len(fast.cache.side.mask) == (4 if step == 1 else 3)
                rows = len(selections[step])
            tokens = torch.randint(3, 23, (rows,), generator=g)


@pytest.mark.parametrize("grad", [False, True], ids=["no gradient", "with gradients"])
def test_select_copies_the_cache_into_room_the_next_step_fills(grad):
    """Two selects in a row, then steps: the logits stay the re-running decoder's; without
    gradients the copy is one position longer and the step writes there, with them (``out=``
    has none) the step appends."""
    model, src = random_model(4), padded_sources(4)
    g = torch.Generator().manual_seed(4)
    with torch.set_grad_enabled(grad):
        fast, slow = SentenceGroupedDecoder(model, src), RerunDecoder(model, src)
        tokens = torch.full((4,), BOS_ID, dtype=torch.long)
        for step in range(6):
            torch.testing.assert_close(fast.step(tokens), slow.step(tokens), atol=1e-5, rtol=1e-5)
            own = [kv for kv, _ in fast.cache.layers]
            assert all(kv.keys.shape[2] == fast.cache.length for kv in own)  # no gap left
            if step == 2:
                for rows in (torch.tensor([3, 2, 1, 0]), torch.tensor([0, 0, 2])):
                    fast.select(rows), slow.select(rows)
                room = 0 if grad else 1
                own = [kv for kv, _ in fast.cache.layers]
                assert all(kv.keys.shape[2] == fast.cache.length + room for kv in own)
            tokens = torch.randint(3, 23, (len(slow.prefix),), generator=g)


def test_rerun_decoder_matches_the_full_forward_pass():
    model = random_model(3)
    src = padded_sources(3)
    tgt = torch.cat([torch.full((4, 1), BOS_ID), torch.randint(3, 23, (4, 6))], dim=1)
    with torch.no_grad():
        full = model(src, tgt)  # (B, T, V)
        state = RerunDecoder(model, src, padding_mask(src, 0))
        for t in range(tgt.shape[1]):
            torch.testing.assert_close(state.step(tgt[:, t]), full[:, t], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("seed", range(3))
def test_greedy_and_beam_give_the_same_tokens_with_either_state(seed):
    model = random_model(seed, src_vocab_size=30, tgt_vocab_size=30)
    src = padded_sources(seed)
    limits = torch.tensor([12, 8, 10, 6])
    with torch.no_grad():
        greedy = [
            greedy_search(cls(model, src), BOS_ID, EOS_ID, limits)
            for cls in (IncrementalDecoder, SentenceGroupedDecoder, RerunDecoder)
        ]
        beams = [
            [h.tokens for h in beam_search(cls(model, src), BOS_ID, EOS_ID, limits, beam_size=3)]
            for cls in (IncrementalDecoder, SentenceGroupedDecoder, RerunDecoder)
        ]
    assert greedy[0] == greedy[1] == greedy[2]
    assert beams[0] == beams[1] == beams[2]


# --- translate(): text in, text out, in order, batched as if one at a time.

from transformer_lib.decoding import SearchConfig, translate  # noqa: E402
from transformer_lib.tokenizer import BPETokenizer  # noqa: E402

SENTENCES = [
    "Ein Hund rennt durch das Gras.",
    "",
    "Zwei Männer spielen Fußball auf einem großen Feld.",
    "Eine Frau.",
    "   ",
    "Kinder spielen im Schnee neben einem Haus.",
]


@pytest.fixture(scope="module")
def tokenizer():
    return BPETokenizer.train([s for s in SENTENCES if s.strip()] * 5, vocab_size=300)


@pytest.mark.parametrize("beam_size", [1, 3])
def test_translate_batched_equals_one_at_a_time(tokenizer, beam_size):
    model = random_model(
        5, src_vocab_size=tokenizer.vocab_size, tgt_vocab_size=tokenizer.vocab_size
    )
    model = model.double()
    together = translate(
        model, tokenizer, SENTENCES, SearchConfig(beam_size, extra_length=6, batch_size=4)
    )
    alone = [
        translate(model, tokenizer, [s], SearchConfig(beam_size, extra_length=6))[0]
        for s in SENTENCES
    ]
    assert together == alone
    assert together[1] == "" and together[4] == ""
    assert len(together) == len(SENTENCES)


def test_translate_cuts_a_too_long_sentence_to_its_beginning_with_a_warning(tokenizer):
    model = random_model(
        6, src_vocab_size=tokenizer.vocab_size, tgt_vocab_size=tokenizer.vocab_size, max_len=12
    )
    from transformer_lib.decoding import default_decoder_state

    seen = []  # the source rows the decoder is given

    def watched(model, src, *args, **kwargs):
        seen.append(src.clone())
        return default_decoder_state(model)(model, src, *args, **kwargs)

    long = SENTENCES[2] * 3
    with pytest.warns(UserWarning, match="translating its beginning only"):
        out = translate(model, tokenizer, [long], SearchConfig(beam_size=2), decoder_state=watched)
    assert isinstance(out[0], str)
    ids = tokenizer.encode(long)
    assert len(ids) + 1 > 12, "the sentence must be too long for the test to mean anything"
    # the first max_len - 1 tokens, then </s>: its beginning, not its end
    assert seen[0][0].tolist() == ids[:11] + [EOS_ID]


# --- The model's own pad id: nothing may assume that padding is token 0.

from transformer_lib.attention import padding_mask as make_padding_mask  # noqa: E402

PAD = 3  # the pad id of the models below; token 0 is an ordinary word to them


class WordTokenizer:
    """A stand-in for the BPE tokenizer: "w0 w7" <-> [0, 7], one token per word, so that a test
    controls every id (token 0 included) and can count output tokens exactly."""

    def encode_batch(self, texts):
        return [[int(word[1:]) for word in text.split()] for text in texts]

    def decode_batch(self, outputs):
        return [" ".join(f"w{token}" for token in ids) for ids in outputs]


def model_with_pad(seed: int, pad_id: int = PAD, **changes) -> Transformer:
    model = random_model(seed, src_vocab_size=23, tgt_vocab_size=23, pad_id=pad_id, **changes)
    return model.double()


def sentences_with_token_zero(seed: int, lengths=(7, 2, 5, 1, 4)) -> list[str]:
    """Sentences of the given lengths over ids 0 and 4..22 (never a special id nor the pad id),
    each with the word 0 in its middle."""
    g = torch.Generator().manual_seed(seed)
    sentences = []
    for n in lengths:
        ids = torch.randint(4, 23, (n,), generator=g).tolist()
        ids[n // 2] = 0
        sentences.append(" ".join(f"w{i}" for i in ids))
    return sentences


class FirstStepRecorder:
    """A ``decoder_state`` for translate: the default SentenceGroupedDecoder, whose first step's
    logits are kept, one row per sentence, under the sentence's tokens (read up to its </s>)."""

    def __init__(self):
        self.logits: dict[tuple[int, ...], torch.Tensor] = {}

    def __call__(self, model, src):
        state, recorder = SentenceGroupedDecoder(model, src), self
        step = state.step

        def first_step(tokens):
            logits = step(tokens)  # (N * k, V): beam search repeats each sentence k times
            state.step = step
            rows = logits[:: len(logits) // len(src)]  # (N, V): one row per sentence
            for row, sentence in zip(rows, src.tolist(), strict=True):
                recorder.logits[tuple(sentence[: sentence.index(EOS_ID)])] = row
            return logits

        state.step = first_step
        return state


@pytest.mark.parametrize("beam_size", [1, 3])
@pytest.mark.parametrize("seed", range(4))
def test_translate_pads_with_the_models_pad_id(beam_size, seed):
    """A sentence in a padded batch gets the output it gets alone, when the pad id is 3 and 0 is a
    word: padding with 0, or masking 0 instead of the pad id, changes the padded sentences."""
    model, tokenizer = model_with_pad(seed), WordTokenizer()
    sentences = sentences_with_token_zero(seed, lengths=(12, 2, 5, 1, 4, 9, 3))
    search = SearchConfig(beam_size, extra_length=10, batch_size=len(sentences))  # one batch
    batched, single = FirstStepRecorder(), FirstStepRecorder()
    together = translate(model, tokenizer, sentences, search, decoder_state=batched)
    alone = [translate(model, tokenizer, [s], search, decoder_state=single)[0] for s in sentences]
    assert together == alone
    assert (
        batched.logits.keys()
        == single.logits.keys()
        == set(map(tuple, tokenizer.encode_batch(sentences)))
    )
    for sentence, logits in single.logits.items():  # the logits too, not only their argmax
        torch.testing.assert_close(batched.logits[sentence], logits, atol=1e-10, rtol=0)


def test_decode_needs_the_source_mask_and_ignores_what_padding_holds():
    model = model_with_pad(2)
    src = torch.tensor([[5, 0, 7, 9, 4], [6, 0, PAD, PAD, PAD]])  # (B, S), the second padded
    other = src.clone()
    other[1, 2:] = torch.tensor([0, 11, 0])  # other tokens where the padding was
    tgt = torch.tensor([[BOS_ID, 8, 0, 12], [BOS_ID, 0, 9, PAD]])  # (B, T)
    src_mask = make_padding_mask(src, PAD)  # (B, 1, 1, S)
    with torch.no_grad():
        memory = model.encode(src, src_mask)
        with pytest.raises(TypeError):
            model.decode(tgt, memory)  # the memory alone cannot tell where the padding is
        states = model.decode(tgt, memory, src_mask)  # (B, T, d_model)
        other_memory = model.encode(other, src_mask)
        assert not torch.allclose(memory[1, 2:], other_memory[1, 2:])  # padding rows differ
        noise = torch.randn(2, 3, 16, dtype=torch.float64) * 10  # (B, S - 2, d_model)
        noisy_memory = torch.cat([other_memory[:, :2], noise], dim=1)
        noisy_memory[0] = other_memory[0]  # the first sentence has no padding
        real = tgt != PAD
        for changed in (other_memory, noisy_memory):
            again = model.decode(tgt, changed, src_mask)
            torch.testing.assert_close(again[real], states[real], atol=1e-10, rtol=0)
            # Without the mask the padded positions would be read: the check can fail.
            unmasked = model.decode(tgt, changed, None)
            assert not torch.allclose(unmasked[1][real[1]], states[1][real[1]], atol=1e-6)


class NeverEnds(torch.nn.Module):
    """Wraps a model's output projection so that </s> is never the most probable token."""

    def __init__(self, generator: torch.nn.Module):
        super().__init__()
        self.inner = generator

    def forward(self, states):
        logits = self.inner(states)
        return logits.index_fill(-1, torch.tensor([EOS_ID], device=logits.device), float("-inf"))


@pytest.mark.parametrize("beam_size", [1, 4])
def test_translate_default_length_limit_is_input_length_plus_50(beam_size):
    """§6.1: "maximum output length ... input length + 50". With </s> never chosen, an output
    of a source of n tokens (n + 1 with its </s>) runs to the limit, n + 1 + 50 tokens, and never
    past the decoder's positions (max_len); a too long source is cut to max_len - 1 tokens."""
    max_len = 64
    model = model_with_pad(4, max_len=max_len)
    model.generator = NeverEnds(model.generator)
    lengths = (1, 5, 12, 13, 30, 80)
    sentences = sentences_with_token_zero(4, lengths)
    with pytest.warns(UserWarning, match="translating its beginning only"):
        outputs = translate(model, WordTokenizer(), sentences, SearchConfig(beam_size))
    produced = [len(text.split()) for text in outputs]
    expected = [min(n + 1 + 50, max_len) for n in lengths]
    assert expected[:3] == [52, 56, 63] and expected[3:] == [max_len] * 3  # both sides of the clamp
    assert produced == expected


class RowCountingState(ToyState):
    """ToyState that never gives </s> (each sentence stops at its limit) and records how many rows
    each step receives."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.rows: list[int] = []

    def step(self, tokens):
        self.rows.append(len(tokens))
        logits = super().step(tokens)
        logits[:, EOS] = float("-inf")
        return logits


@pytest.mark.parametrize("k", [2, 3])
def test_beam_search_steps_only_the_rows_of_unfinished_sentences(k):
    """A sentence at its length limit finishes all k beams at once; from the next step on, the
    state receives k rows for each sentence still searching, none for the finished ones (the
    first step, before the beams split, one row a sentence)."""
    limits = [1, 2, 2, 4, 6]
    state = RowCountingState(len(limits), vocab=8, seed=1)
    beam_search(state, BOS, EOS, torch.tensor(limits), beam_size=k)
    expected = [len(limits)] + [k * sum(limit >= step for limit in limits) for step in range(2, 7)]
    assert state.rows == expected


def test_most_probable_is_pytorchs_argmax_on_every_path():
    """NumPy's argmax on a CPU's float32 logits, PyTorch's elsewhere: the same token, the first of
    equals, whatever the layout, the gradient or the dtype."""
    logits = torch.randint(0, 3, (64, 50), generator=torch.Generator().manual_seed(0)).float()
    logits[5], logits[7, 10], logits[9, [3, 8]] = float("-inf"), float("inf"), float("nan")
    for x in (
        logits,
        logits.t().contiguous().t(),
        logits.clone().requires_grad_(),
        logits.double(),
    ):
        found = most_probable(x)
        assert found.dtype == torch.long and torch.equal(found, x.argmax(dim=-1))
    assert torch.equal(most_probable(logits.bfloat16()), logits.bfloat16().argmax(dim=-1))


# --- What a failed call leaves behind, and what a cache refuses.


def test_translate_gives_the_model_its_mode_back_when_a_search_fails(tokenizer):
    model = random_model(
        7, src_vocab_size=tokenizer.vocab_size, tgt_vocab_size=tokenizer.vocab_size
    )
    model.train()

    def failing(model, src):
        raise RuntimeError("the search failed")

    with pytest.raises(RuntimeError, match="the search failed"):
        translate(model, tokenizer, ["Ein Hund rennt."], decoder_state=failing)
    assert model.training  # dropout on again, as the caller had it


def test_a_cache_takes_one_new_position_at_a_time():
    """The cached self-attention has no causal mask among new positions: two at once would let
    the first see the second, so decode refuses them; one at a time it runs."""
    model = random_model(8)
    state = IncrementalDecoder(model, padded_sources(8))
    two = torch.full((4, 2), BOS_ID)
    with pytest.raises(ValueError, match="one position at a time, not 2"):
        model.decode(two, None, None, cache=state.cache)
    assert state.step(torch.full((4,), BOS_ID)).shape == (4, model.config.tgt_vocab_size)
