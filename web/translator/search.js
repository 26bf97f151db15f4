// The searches of the decoding chapter (paper §6.1) for one sentence: greedy search, and beam
// search with GNMT's length penalty. The names, the rules and the order of every comparison are
// those of transformer_lib.decoding (greedy_search, beam_search, length_penalty), so that the
// page writes the tokens that Python writes with the same graphs.
//
// A decoder state has the two methods of the chapter's DecoderState:
//   await state.step(tokens)  tokens: number[N] -> logits: Float32Array, N rows of V, row-major
//   state.select(rows)        rows: number[N'], the rows to keep, in that order

/**
 * GNMT's length penalty ((5 + |Y|) / 6) ** alpha (Wu et al., 2016), as §6.1 uses it.
 * @param {number} length |Y|, the output tokens, </s> included
 * @param {number} alpha
 */
export function lengthPenalty(length, alpha) {
  return ((5 + length) / 6) ** alpha;
}

/** The index of the largest of values[start, start + size), the first on ties (as torch.argmax). */
function argmax(values, start, size) {
  let best = start;
  for (let i = start + 1; i < start + size; i++) {
    if (values[i] > values[best]) best = i;
  }
  return best - start;
}

/**
 * The most probable token at every step, for one sentence (the state holds one row).
 * @param {{step: Function, select: Function}} state
 * @param {number} bosId <s>, the first input
 * @param {number} eosId </s>, which ends the output
 * @param {number} maxLength the most output tokens
 * @returns {Promise<{tokens: number[], ended: boolean}>} the output without <s> and </s>, and
 *   whether it ended with </s> (rather than at maxLength)
 */
export async function greedy(state, bosId, eosId, maxLength) {
  const tokens = [];
  let token = bosId;
  for (;;) {
    const logits = await state.step([token]);
    token = argmax(logits, 0, logits.length);
    if (token === eosId) return { tokens, ended: true };
    tokens.push(token);
    if (tokens.length >= maxLength) return { tokens, ended: false };
  }
}

/**
 * log_softmax of one row, each value rounded to float32 as PyTorch computes it in float32.
 * @returns {Float32Array} (V)
 */
function logSoftmax(logits, start, size) {
  let max = -Infinity;
  for (let i = start; i < start + size; i++) max = Math.max(max, logits[i]);
  let sum = 0;
  for (let i = start; i < start + size; i++) sum += Math.exp(logits[i] - max);
  const shift = max + Math.log(sum);
  const out = new Float32Array(size);
  for (let i = 0; i < size; i++) out[i] = logits[start + i] - shift;
  return out;
}

/**
 * The best `count` of the k × V candidates (a beam's score plus a token's log-probability,
 * added in float32 as PyTorch adds them), best first; on ties the lower index first.
 * @returns {{score: number, beam: number, token: number}[]}
 */
function bestCandidates(logits, scores, vocab, count) {
  const best = []; // sorted, best first, at most `count`
  for (let beam = 0; beam < scores.length; beam++) {
    const logProbs = logSoftmax(logits, beam * vocab, vocab);
    for (let token = 0; token < vocab; token++) {
      const score = Math.fround(scores[beam] + logProbs[token]);
      if (best.length === count && !(score > best[count - 1].score)) continue;
      let at = best.length;
      while (at > 0 && score > best[at - 1].score) at--;
      best.splice(at, 0, { score, beam, token });
      if (best.length > count) best.pop();
    }
  }
  return best;
}

/**
 * Beam search (§6.1) for one sentence: the best finished hypothesis by log-probability divided
 * by lengthPenalty. The state holds one row on entry and is expanded to beamSize rows. As in the
 * chapter: of the best 2k candidates, those among the first k that end (with </s>, or at
 * maxLength) are finished hypotheses; the first k that do not end are the next beams; the search
 * stops when k hypotheses are finished or at maxLength.
 * @returns {Promise<{tokens: number[], logProb: number, score: number, ended: boolean}>}
 */
export async function beamSearch(state, bosId, eosId, maxLength, beamSize = 4, alpha = 0.6) {
  const k = beamSize;
  if (!(k >= 1)) throw new Error(`beamSize must be at least 1, got ${beamSize}`);
  state.select(new Array(k).fill(0));
  let scores = [0, ...new Array(k - 1).fill(-Infinity)]; // all beams start as one "<s>"
  let prefixes = Array.from({ length: k }, () => [bosId]);
  const finished = [];
  for (let step = 1; ; step++) {
    const logits = await state.step(prefixes.map((prefix) => prefix[prefix.length - 1]));
    const vocab = logits.length / k;
    const candidates = bestCandidates(logits, scores, vocab, Math.min(2 * k, k * vocab));
    const atLimit = maxLength <= step;
    const ends = (candidate) => candidate.token === eosId || atLimit;
    const penalty = lengthPenalty(step, alpha);
    for (const candidate of candidates.slice(0, k)) {
      if (ends(candidate) && finished.length < k && candidate.score > -Infinity) {
        const tokens = prefixes[candidate.beam].slice(1);
        if (candidate.token !== eosId) tokens.push(candidate.token);
        const ended = candidate.token === eosId;
        finished.push({ tokens, logProb: candidate.score, score: candidate.score / penalty, ended });
      }
    }
    if (finished.length >= k || atLimit) break;
    // The next beams: the candidates that do not end, in rank order (a stable sort on "ends").
    const next = [...candidates.filter((c) => !ends(c)), ...candidates.filter(ends)].slice(0, k);
    state.select(next.map((candidate) => candidate.beam));
    prefixes = next.map((candidate) => [...prefixes[candidate.beam], candidate.token]);
    scores = next.map((candidate) => candidate.score);
  }
  return finished.reduce((best, hypothesis) => (hypothesis.score > best.score ? hypothesis : best));
}
