// The book's byte-level BPE vocabulary in the page: the `tokenizers` library's tokenizer.json,
// read by Hugging Face's JavaScript tokenizer, used the way transformer_lib's BPETokenizer uses
// it in Python (book/data.md): no special token added by encoding, decoding up to the first
// </s> without special tokens, and without the space that encoding puts before the first word.

/** The special tokens, in the order of their ids (transformer_lib.tokenizer.SPECIAL_TOKENS). */
const SPECIAL_COUNT = 4; // <pad>, <s>, </s>, <unk>

export class PieceTokenizer {
  /**
   * @param {Function} Tokenizer the class of @huggingface/tokenizers
   * @param {object} json the parsed tokenizer.json
   * @param {number} eosId the id of </s>
   */
  constructor(Tokenizer, json, eosId) {
    this.eosId = eosId;
    this.specialNames = new Map(json.added_tokens.map((token) => [token.id, token.content]));
    // Python's BPETokenizer reads "<s>" typed in a sentence as text, not as the control token
    // (encode_special_tokens): without added tokens to look for, this library does the same.
    // Its default clean-up of spaces before punctuation is not the `tokenizers` library's.
    this.tokenizer = new Tokenizer(
      { ...json, added_tokens: [] },
      { clean_up_tokenization_spaces: false },
    );
  }

  /** The ids of one sentence, without <s> or </s>. @returns {number[]} */
  encode(text) {
    return this.tokenizer.encode(text, { add_special_tokens: false }).ids;
  }

  /** The text of ids up to the first </s>, special tokens left out. @returns {string} */
  decode(ids) {
    const end = ids.indexOf(this.eosId);
    const kept = (end < 0 ? ids : ids.slice(0, end)).filter((id) => id >= SPECIAL_COUNT);
    if (kept.length === 0) return ""; // the library refuses an empty list
    const text = this.tokenizer.decode(kept, { skip_special_tokens: true });
    return text.startsWith(" ") ? text.slice(1) : text;
  }

  /**
   * A readable label for each id, as the recorded runs label attention maps
   * (transformer_lib.book.report.token_labels): the piece's text without the space that marks a word
   * start, special tokens by name, "␣" for a piece that is only a space.
   * @returns {string[]}
   */
  labels(ids) {
    return ids.map((id) =>
      id < SPECIAL_COUNT
        ? this.specialNames.get(id)
        : this.tokenizer.decode([id], { skip_special_tokens: true }).trim() || "␣",
    );
  }
}
