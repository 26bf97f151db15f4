"""Data (§5.1): loading with its errors, the byte-pair tokenizer's exact round trip, and batches
by length (every pair once per epoch across ranks, within the budget, reproducible)."""

import gzip
import hashlib
import io
import os
import re
from pathlib import Path
from urllib.error import URLError

import pytest
import torch
from helpers import MULTI30K
from hypothesis import given, settings
from hypothesis import strategies as st

from transformer_lib import data
from transformer_lib.attention import padding_mask, subsequent_mask
from transformer_lib.batching import (
    Batch,
    BatchesByLength,
    collate,
    encode_pairs,
    make_batches,
    plan_batches,
)
from transformer_lib.data import (
    MULTI30K_SHA256,
    ChecksumError,
    DataError,
    DataNotFoundError,
    load_multi30k,
    load_parallel,
    multi30k_file,
    read_lines,
    split_lines,
)
from transformer_lib.tokenizer import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    SPECIAL_TOKENS,
    UNK_ID,
    VOCAB_SIZE,
    BPETokenizer,
)

SHARED = MULTI30K
needs_data = pytest.mark.usefixtures("multi30k")


def write_gz(path: Path, lines: list[str]) -> Path:
    path.write_bytes(gzip.compress("".join(f"{line}\n" for line in lines).encode()))
    return path


@pytest.fixture
def no_env(monkeypatch, tmp_path):
    """No TRANSFORMER_LIB_DATA, and a cache under tmp_path."""
    monkeypatch.delenv(data.DATA_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache" / "transformer_lib" / "multi30k"


def fake_urlopen(payload: bytes, calls: list):
    def urlopen(url, timeout=None):
        calls.append(url)
        response = io.BytesIO(payload)
        response.headers = {}  # no Content-Length
        return response

    return urlopen


# ---------------------------------------------------------------------------- loading


def test_load_parallel_plain_and_gzipped(tmp_path):
    src = write_gz(tmp_path / "a.gz", ["Ein Hund.", " Zwei  Katzen. ", "x\u2028y"])
    tgt = tmp_path / "b.txt"
    tgt.write_text("A dog.\nTwo  cats.\nx y\n", encoding="utf-8")
    assert load_parallel(src, tgt) == [
        ("Ein Hund.", "A dog."),
        ("Zwei  Katzen.", "Two  cats."),
        ("x\u2028y", "x y"),
    ]


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from("ab \t\r\n\u2028\u2029\x85\x0b\x0c\x1c"), max_size=30))
def test_split_lines_splits_where_python_reading_at_newline_splits(text):
    """The reference: Python's own stream reading with lines ended by "\\n" alone."""
    reference = [line.removesuffix("\n").strip() for line in io.StringIO(text, newline="\n")]
    assert split_lines(text) == reference


def test_split_lines_keeps_unicode_separators_inside_a_line():
    text = "one\u2028two\u2029three\x85four\r\nnext line\n"
    assert len(text.splitlines()) == 5
    assert split_lines(text) == ["one\u2028two\u2029three\x85four", "next line"]
    assert split_lines("") == [] and split_lines("\n") == [""] and split_lines("a") == ["a"]


def test_read_lines_is_split_lines_of_the_decoded_file(tmp_path):
    text = "Ein Hund\u2028läuft.\r\n\n  Zwei Katzen. \n"
    plain, zipped = tmp_path / "plain.txt", tmp_path / "zipped.txt"
    plain.write_bytes(text.encode())
    zipped.write_bytes(gzip.compress(text.encode()))
    assert read_lines(plain) == read_lines(zipped) == split_lines(text)


def test_a_file_that_is_not_utf8_or_a_damaged_gzip_is_a_data_error_naming_it(tmp_path):
    latin = tmp_path / "latin.txt"
    latin.write_bytes("Ein Hund läuft.\n".encode("latin-1"))
    with pytest.raises(DataError, match=re.escape(f"{latin} is not UTF-8 text")):
        read_lines(latin)
    cut = tmp_path / "cut.gz"
    cut.write_bytes(gzip.compress(b"Ein Hund.\n" * 100)[:30])
    with pytest.raises(DataError, match=re.escape(f"{cut} is a damaged gzip file")):
        read_lines(cut)
    with pytest.raises(FileNotFoundError, match="nothing.txt"):
        read_lines(tmp_path / "nothing.txt")


def test_mismatched_line_counts_name_both_files(tmp_path):
    src = write_gz(tmp_path / "src.gz", ["a", "b", "c"])
    tgt = write_gz(tmp_path / "tgt.gz", ["a", "b"])
    with pytest.raises(DataError) as err:
        load_parallel(src, tgt)
    message = str(err.value)
    assert str(src) in message and str(tgt) in message and "3" in message and "2" in message
    assert isinstance(err.value, ValueError)


@pytest.mark.parametrize(
    "split,src,tgt,valid",
    [
        ("dev", "de", "en", "test_2016_flickr"),
        ("train", "fr", "en", "de, en"),
        ("train", "de", "xx", "de, en"),
    ],
)
def test_unknown_split_or_language_lists_the_valid_ones(split, src, tgt, valid, no_env):
    with pytest.raises(DataError, match=valid):
        load_multi30k(split, src, tgt)


def test_no_data_and_no_network_says_how_to_provide_it(no_env, monkeypatch):
    def offline(url, timeout=None):
        raise URLError("no route to host")

    monkeypatch.setattr(data, "urlopen", offline)
    with pytest.raises(DataNotFoundError) as err:
        load_multi30k("val")
    message = str(err.value)
    assert data.DATA_ENV in message and "data_dir" in message
    assert data.MULTI30K_URL + "val.de.gz" in message
    assert isinstance(err.value, FileNotFoundError)
    assert not list(no_env.glob("*")), "a failed download left a file behind"


def test_a_given_directory_is_never_downloaded_into(tmp_path, monkeypatch, no_env):
    calls = []
    monkeypatch.setattr(data, "urlopen", fake_urlopen(b"", calls))
    with pytest.raises(DataNotFoundError, match="data_dir"):
        multi30k_file("val", "de", data_dir=tmp_path)
    monkeypatch.setenv(data.DATA_ENV, str(tmp_path))
    with pytest.raises(DataNotFoundError, match=data.DATA_ENV):
        multi30k_file("val", "de")
    assert calls == [] and list(tmp_path.iterdir()) == []


def test_bad_download_leaves_nothing_good_download_lands(no_env, monkeypatch):
    calls = []
    monkeypatch.setattr(data, "urlopen", fake_urlopen(b"not the file", calls))
    with pytest.raises(ChecksumError, match="val.de.gz"):
        multi30k_file("val", "de")
    assert calls == [data.MULTI30K_URL + "val.de.gz"]
    assert not no_env.exists() or not list(no_env.iterdir()), "a bad download left a file behind"

    payload = b"pretend these are the published bytes"
    monkeypatch.setitem(MULTI30K_SHA256, "val.de.gz", hashlib.sha256(payload).hexdigest())
    monkeypatch.setattr(data, "urlopen", fake_urlopen(payload, calls))
    path = multi30k_file("val", "de")
    assert path == no_env / "val.de.gz" and path.read_bytes() == payload
    assert sorted(p.name for p in no_env.iterdir()) == ["val.de.gz"]
    # A second call finds the cached file and does not download again.
    assert multi30k_file("val", "de") == path and len(calls) == 2


def test_a_cached_file_damaged_later_is_checked_again_and_not_used(no_env, monkeypatch):
    """The cache is checked on every use, not only on download: a file that changed in the cache
    (a disk error, a partial copy, an edit) is refused with a message that says to delete it."""
    payload = b"pretend these are the published bytes"
    monkeypatch.setitem(MULTI30K_SHA256, "val.de.gz", hashlib.sha256(payload).hexdigest())
    calls = []
    monkeypatch.setattr(data, "urlopen", fake_urlopen(payload, calls))
    path = multi30k_file("val", "de")
    assert path.read_bytes() == payload and len(calls) == 1
    path.write_bytes(payload[:-1] + b"!")  # one byte changed, after the download
    with pytest.raises(ChecksumError, match=r"val\.de\.gz does not have the SHA-256.*Delete it"):
        multi30k_file("val", "de")
    assert len(calls) == 1  # neither downloaded again nor silently replaced
    path.unlink()  # as the message says: the next use downloads it again
    assert multi30k_file("val", "de").read_bytes() == payload and len(calls) == 2


def test_checksum_mismatch_names_the_file(tmp_path, monkeypatch):
    monkeypatch.delenv(data.DATA_ENV, raising=False)
    write_gz(tmp_path / "val.de.gz", ["Ein Hund."])
    write_gz(tmp_path / "val.en.gz", ["A dog."])
    with pytest.raises(ChecksumError, match="val.de.gz"):
        load_multi30k("val", data_dir=tmp_path)
    # Decompressed files in a directory the user names are the documented way to use changed data.
    for name in ("val.de", "val.en"):
        (tmp_path / f"{name}.gz").unlink()
    (tmp_path / "val.de").write_text("Ein Hund.\n", encoding="utf-8")
    (tmp_path / "val.en").write_text("A dog.\n", encoding="utf-8")
    assert load_multi30k("val", data_dir=tmp_path) == [("Ein Hund.", "A dog.")]


@needs_data
def test_multi30k_has_its_published_sizes():
    sizes = {
        "train": 29000,
        "val": 1014,
        "test_2016_flickr": 1000,
        "test_2017_flickr": 1000,
        "test_2017_mscoco": 461,
        "test_2018_flickr": 1071,
    }
    for split, size in sizes.items():
        pairs = load_multi30k(split, "en", "de", data_dir=SHARED)
        assert len(pairs) == size, split
        assert all(en and de for en, de in pairs), split
    assert load_multi30k("train", data_dir=SHARED)[0][0].startswith("Zwei junge weiße Männer")


# ---------------------------------------------------------------------------- the tokenizer

SMALL_TEXT = [
    "Zwei junge weiße Männer sind im Freien in der Nähe vieler Büsche.",
    "Two young, White males are outside near many bushes.",
    "Ein kleines Mädchen klettert in ein Spielhaus aus Holz.",
    "A little girl climbing into a wooden playhouse.",
] * 5


@pytest.fixture(scope="module")
def small_bpe():
    return BPETokenizer.train(SMALL_TEXT, vocab_size=400)


def test_special_ids_are_fixed(small_bpe):
    assert (PAD_ID, BOS_ID, EOS_ID, UNK_ID) == (0, 1, 2, 3)
    for token_id, token in enumerate(SPECIAL_TOKENS):
        assert small_bpe.token_to_id(token) == token_id
    assert small_bpe.token_to_id("<pad>") == PAD_ID == 0


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=60).filter(lambda t: not t[:1].isspace()))
def test_any_text_round_trips(small_bpe, text):
    """Byte-level BPE: unseen characters, control tokens as text, double spaces all survive."""
    ids = small_bpe.encode(text)
    assert UNK_ID not in ids
    assert all(i >= len(SPECIAL_TOKENS) for i in ids)
    assert small_bpe.decode(ids) == text


def test_decode_stops_at_eos_and_skips_specials(small_bpe):
    ids = small_bpe.encode("Ein Hund.")
    other = small_bpe.encode("Zwei Katzen.")
    assert small_bpe.decode([BOS_ID, *ids, EOS_ID, *other]) == "Ein Hund."
    assert small_bpe.decode([BOS_ID, *ids, PAD_ID, PAD_ID]) == "Ein Hund."
    assert small_bpe.decode(torch.tensor([BOS_ID, *ids, EOS_ID, PAD_ID])) == "Ein Hund."
    assert small_bpe.decode_batch([ids, other]) == ["Ein Hund.", "Zwei Katzen."]
    assert small_bpe.encode_batch(["Ein Hund.", "Zwei Katzen."]) == [ids, other]


def test_save_and_load_give_the_same_ids(small_bpe, tmp_path):
    path = tmp_path / "sub" / "bpe.json"
    small_bpe.save(path)
    loaded = BPETokenizer.load(path)
    assert loaded.vocab_size == small_bpe.vocab_size
    for text in SMALL_TEXT + ["<s> </s> <unk> ünseen ĉharacters"]:
        assert loaded.encode(text) == small_bpe.encode(text)
        assert loaded.decode(loaded.encode(text)) == text
    assert sorted(p.name for p in path.parent.iterdir()) == ["bpe.json"]


def test_load_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="no tokenizer file"):
        BPETokenizer.load(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(DataError, match="bad.json"):
        BPETokenizer.load(tmp_path / "bad.json")
    with pytest.raises(DataError, match="vocab_size"):
        BPETokenizer.train(SMALL_TEXT, vocab_size=100)


@needs_data
def test_every_training_sentence_round_trips():
    train = load_multi30k("train", data_dir=SHARED)
    text = [s for pair in train for s in pair]
    bpe = BPETokenizer.train(text, vocab_size=VOCAB_SIZE)
    assert bpe.vocab_size == VOCAB_SIZE
    ids = bpe.encode_batch(text)
    assert not any(UNK_ID in s for s in ids)
    decoded = bpe.decode_batch(ids)
    wrong = [(d, t) for d, t in zip(decoded, text, strict=True) if d != t]
    assert not wrong, wrong[:3]


# ---------------------------------------------------------------------------- batching


def numbered_pairs(n: int, seed: int = 0, longest: int = 40):
    """Pairs whose first source token is 1000 + their index, so a batch row names its pair."""
    rng = torch.Generator().manual_seed(seed)
    pairs = []
    for i in range(n):
        s, t = torch.randint(0, longest, (2,), generator=rng).tolist()
        pairs.append(([1000 + i] + [7] * s, [8] * (t + 1)))
    return pairs


def pair_indices(batches) -> list[int]:
    return [int(x) - 1000 for b in batches for x in b.src[:, 0]]


@pytest.mark.parametrize("world_size", [1, 2, 3, 4, 7])
@pytest.mark.parametrize("n", [7, 50, 333])
def test_every_pair_once_per_epoch_across_ranks_in_equal_shares(world_size, n):
    pairs = numbered_pairs(n, seed=n)
    for epoch in (0, 1):
        shares = [make_batches(pairs, 200, 5, epoch, r, world_size) for r in range(world_size)]
        assert len({len(share) for share in shares}) == 1, [len(s) for s in shares]
        seen = [i for share in shares for i in pair_indices(share)]
        assert sorted(seen) == list(range(n))


@pytest.mark.parametrize("by_length", [True, False])
def test_one_process_shares_the_plan_of_plan_batches(by_length):
    """make_batches for one process collates the data chapter's plan_batches, and
    plan_batches with by_length is fill_batches' batches, shuffled: the same pairs."""
    pairs = numbered_pairs(333, seed=3)
    lengths = [(len(s) + 1, len(t) + 1) for s, t in pairs]
    for epoch in (0, 1):
        alone = plan_batches(lengths, 200, 5, epoch)
        assert [pair_indices([b]) for b in make_batches(pairs, 200, 5, epoch)] == alone
        unsorted = plan_batches(lengths, 200, 5, epoch, by_length=by_length)
        assert sorted(i for b in unsorted for i in b) == list(range(len(lengths)))


def test_no_batch_exceeds_the_budget_and_batches_are_full():
    pairs = numbered_pairs(500)
    for max_tokens in (41, 100, 1000):
        batches = make_batches(pairs, max_tokens, seed=3)
        for b in batches:
            assert b.src.numel() <= max_tokens and b.tgt_in.numel() <= max_tokens
        # Greedy filling wastes little: the batches hold most of the budget on average.
        assert len(batches) < 2 * sum(len(s) + len(t) + 2 for s, t in pairs) / max_tokens + 2


def test_same_seed_same_batches_other_epoch_or_seed_other_batches():
    pairs = numbered_pairs(300)

    def plan(seed, epoch):
        return [pair_indices([b]) for b in make_batches(pairs, 300, seed, epoch)]

    assert plan(1, 0) == plan(1, 0)
    assert plan(1, 0) != plan(1, 1)
    assert plan(1, 0) != plan(2, 0)
    batches = BatchesByLength(pairs, 300, seed=1)
    assert [pair_indices([b]) for b in batches(4)] == plan(1, 4)


def test_batches_group_similar_lengths():
    # Source and target lengths correlate, as in translation; random batches would waste ~1/3.
    rng = torch.Generator().manual_seed(0)
    pairs = []
    for n in torch.randint(1, 40, (2000,), generator=rng).tolist():
        pairs.append(([7] * n, [8] * (n + int(torch.randint(0, 3, (1,), generator=rng)))))
    batches = make_batches(pairs, 2000)
    real = sum(int(b.src_mask.sum()) + int((b.tgt_in != 0).sum()) for b in batches)
    cells = sum(b.src.numel() + b.tgt_in.numel() for b in batches)
    assert 1 - real / cells < 0.1


def test_a_pair_longer_than_the_budget_is_an_error_naming_it():
    pairs = numbered_pairs(20, longest=10)
    pairs[13] = ([1013] + [7] * 60, [8])
    with pytest.raises(DataError, match="pair 13"):
        make_batches(pairs, 50)
    assert len(encode_pairs(_Chars(), [("ab", "c"), ("abcdef", "c")], max_len=3)) == 1


def test_bad_sharding_arguments():
    with pytest.raises(DataError, match="processes"):
        make_batches(numbered_pairs(3), 100, world_size=4)
    with pytest.raises(DataError, match="rank"):
        make_batches(numbered_pairs(3), 100, rank=2, world_size=2)


class _Chars:
    """A stand-in tokenizer: one id per character."""

    def encode_batch(self, texts):
        return [[ord(c) for c in text] for text in texts]


def test_collate_shapes_shift_and_masks():
    pairs = [([5, 6, 7], [9, 10]), ([5], [9, 10, 11, 12])]
    batch = collate(pairs)
    assert isinstance(batch, Batch) and len(batch) == 2
    assert batch.src.tolist() == [[5, 6, 7, EOS_ID], [5, EOS_ID, PAD_ID, PAD_ID]]
    assert batch.tgt_in.tolist() == [[BOS_ID, 9, 10, PAD_ID, PAD_ID], [BOS_ID, 9, 10, 11, 12]]
    assert batch.tgt_out.tolist() == [[9, 10, EOS_ID, PAD_ID, PAD_ID], [9, 10, 11, 12, EOS_ID]]
    for tensor in (batch.src, batch.tgt_in, batch.tgt_out):
        assert tensor.dtype == torch.int64
    assert batch.n_tokens == 3 + 5
    # Masks written out: key j is visible from query i iff j is real and j <= i.
    assert batch.src_mask.shape == (2, 1, 1, 4) and batch.src_mask.dtype == torch.bool
    assert batch.src_mask[:, 0, 0].tolist() == [[True] * 4, [True, True, False, False]]
    assert batch.tgt_mask.shape == (2, 1, 5, 5)
    lengths = [3, 5]
    for b in range(2):
        for i in range(5):
            for j in range(5):
                assert bool(batch.tgt_mask[b, 0, i, j]) == (j < lengths[b] and j <= i)
    assert torch.equal(batch.tgt_mask, padding_mask(batch.tgt_out, PAD_ID) & subsequent_mask(5))
    moved = batch.to("cpu")
    assert isinstance(moved, Batch) and torch.equal(moved.src, batch.src)
    with pytest.raises(DataError):
        collate([])


@needs_data
def test_multi30k_train_batches_under_the_paper_budget():
    train = load_multi30k("train", data_dir=SHARED)[:3000]
    bpe = BPETokenizer.train([s for p in train for s in p], vocab_size=1000)
    pairs = encode_pairs(bpe, train)
    shares = [make_batches(pairs, 2500, seed=0, epoch=2, rank=r, world_size=2) for r in (0, 1)]
    assert len(shares[0]) == len(shares[1])
    restored = sorted(
        (bpe.decode(row_src), bpe.decode(row_tgt))
        for share in shares
        for b in share
        for row_src, row_tgt in zip(b.src, b.tgt_out, strict=True)
    )
    assert restored == sorted(train)


def test_tokenizer_json_text_round_trip():
    tokenizer = BPETokenizer.train(["ein Hund läuft", "a dog runs"] * 20, vocab_size=300)
    again = BPETokenizer.from_json(tokenizer.to_json())
    assert again.encode("ein Hund runs") == tokenizer.encode("ein Hund runs")
    with pytest.raises(DataError, match="not a tokenizers JSON"):
        BPETokenizer.from_json("{")


def test_a_test_that_needs_multi30k_fails_without_it(tmp_path):
    """A run without the data must not pass by skipping what needs it."""
    import subprocess
    import sys

    env = {**os.environ, "TRANSFORMER_LIB_DATA": str(tmp_path)}  # an empty folder
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0",
         f"{__file__}::test_every_training_sentence_round_trips"],
        capture_output=True, text=True, env=env, cwd=Path(__file__).parent.parent, timeout=300,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout[-2000:]
    assert "Multi30k files are missing" in done.stdout and "skipped" not in done.stdout
