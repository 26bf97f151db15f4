// Runs the page's searches (web/translator/search.js) on the table-driven decoder states that
// tests/test_site.py describes, and prints what they found as JSON: node search_cases.mjs CASES
import fs from "node:fs";
import { beamSearch, greedy, lengthPenalty } from "../../web/translator/search.js";

const { table, vocab, rows, cases } = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
const logits = Float32Array.from(table.flat());

/** The next token's logits depend on the whole prefix, through a hash of it (as in the test). */
class TableState {
  constructor(start) {
    this.hashes = [start];
  }
  async step(tokens) {
    this.hashes = this.hashes.map((hash, i) => (hash * 31 + tokens[i] + 1) % rows);
    const out = new Float32Array(this.hashes.length * vocab);
    this.hashes.forEach((hash, i) => out.set(logits.subarray(hash * vocab, (hash + 1) * vocab), i * vocab));
    return out;
  }
  select(keep) {
    this.hashes = keep.map((row) => this.hashes[row]);
  }
}

const found = [];
for (const { start, bos, eos, maxLength, beam, alpha } of cases) {
  const state = new TableState(start);
  found.push(beam === 0 ? await greedy(state, bos, eos, maxLength) : await beamSearch(state, bos, eos, maxLength, beam, alpha));
}
console.log(JSON.stringify({ found, penalty: lengthPenalty(7, 0.6) }));
