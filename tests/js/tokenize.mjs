// Encodes sentences with the page's tokenizer (web/translator/tokenizer.js over the vendored
// @huggingface/tokenizers) and prints ids, text and labels as JSON:
// node tokenize.mjs TOKENIZER_JSON SENTENCES_JSON
import fs from "node:fs";
import { Tokenizer } from "../../node_modules/@huggingface/tokenizers/dist/tokenizers.min.mjs";
import { PieceTokenizer } from "../../web/translator/tokenizer.js";

const tokenizer = new PieceTokenizer(Tokenizer, JSON.parse(fs.readFileSync(process.argv[2], "utf8")), 2);
const sentences = JSON.parse(fs.readFileSync(process.argv[3], "utf8"));
console.log(
  JSON.stringify(
    sentences.map((text) => {
      const ids = tokenizer.encode(text);
      return { ids, text: tokenizer.decode([...ids, 2, 9]), labels: tokenizer.labels([1, ...ids, 2]) };
    }),
  ),
);
