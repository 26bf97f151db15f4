// Loading: the runtime (onnxruntime-web's WebAssembly build) and a model's two graphs and
// tokenizer, each file fetched with its progress reported; and the decoder state that runs the
// graphs, as transformer_lib.export.OnnxDecoder does in Python (book/export.md).

/**
 * Fetch a file whole, calling onBytes(n) as each chunk of n bytes arrives.
 * @returns {Promise<Uint8Array>}
 */
export async function download(url, onBytes = () => {}) {
  const response = await fetch(url);
  if (!response.ok) throw new Error(`${url} could not be fetched (HTTP ${response.status})`);
  const reader = response.body.getReader();
  const chunks = [];
  let length = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    chunks.push(value);
    length += value.length;
    onBytes(value.length);
  }
  const bytes = new Uint8Array(length);
  let at = 0;
  for (const chunk of chunks) {
    bytes.set(chunk, at);
    at += chunk.length;
  }
  return bytes;
}

/** The runtime files, relative to the page's static folder, as the site serves them. */
export const RUNTIME_FILES = [
  "vendor/ort.wasm.min.mjs",
  "vendor/ort-wasm-simd-threaded.mjs",
  "vendor/ort-wasm-simd-threaded.wasm",
  "vendor/tokenizers.min.mjs",
];

/**
 * onnxruntime-web (WebAssembly only) and the tokenizer library, from the site's own copies.
 * @param {URL} base the folder of this module
 * @returns {Promise<{ort: object, Tokenizer: Function}>}
 */
export async function loadRuntime(base, onBytes) {
  const [ort, { Tokenizer }] = await Promise.all([
    import(new URL("vendor/ort.wasm.min.mjs", base).href),
    import(new URL("vendor/tokenizers.min.mjs", base).href),
  ]);
  // One thread: more need cross-origin isolation, which a static host such as GitHub Pages
  // cannot switch on. The WebAssembly binary is fetched here, so that its progress shows.
  ort.env.wasm.numThreads = 1;
  ort.env.wasm.wasmPaths = new URL("vendor/", base).href;
  ort.env.wasm.wasmBinary = await download(new URL("vendor/ort-wasm-simd-threaded.wasm", base), onBytes);
  return { ort, Tokenizer };
}

/** A copy of `tensor` (batch first) holding the given rows, in that order. */
function selectRows(ort, tensor, rows) {
  const [batch, ...rest] = tensor.dims;
  const size = batch === 0 ? 0 : tensor.data.length / batch;
  const data = new tensor.data.constructor(rows.length * size);
  rows.forEach((row, i) => data.set(tensor.data.subarray(row * size, (row + 1) * size), i * size));
  return new ort.Tensor(tensor.type, data, [rows.length, ...rest]);
}

/**
 * The decoder state of the decoding chapter over the two graphs: the encoder has run once;
 * each step runs the decoder step with the cache, which select() reorders row by row.
 */
export class GraphDecoder {
  constructor(model, arrays) {
    this.model = model;
    this.arrays = arrays; // src, cross_keys, cross_values, self_keys, self_values (batch first)
    this.crossAttention = null; // of the last step: (N, layers, h, S)
  }

  /** @param {number[]} tokens (N) @returns {Promise<Float32Array>} logits (N × V) */
  async step(tokens) {
    const { ort, decoder } = this.model;
    const ids = BigInt64Array.from(tokens, (token) => BigInt(token));
    const out = await decoder.run({ tokens: new ort.Tensor("int64", ids, [tokens.length]), ...this.arrays });
    this.arrays.self_keys = out.self_keys_out;
    this.arrays.self_values = out.self_values_out;
    this.crossAttention = out.cross_attention;
    return out.logits.data;
  }

  /** @param {number[]} rows the rows to keep, in that order */
  select(rows) {
    for (const name of Object.keys(this.arrays)) {
      this.arrays[name] = selectRows(this.model.ort, this.arrays[name], rows);
    }
  }
}

/** A model of the page: its export description, sessions of both graphs, and its tokenizer. */
export class Model {
  /**
   * @param {{ort: object, Tokenizer: Function}} runtime
   * @param {URL} folder the model's export folder (float32/, 8bit/, tokenizer.json)
   * @param {object} entry the model's export.json
   * @param {string} form "float32" or "8bit"
   */
  static async load(runtime, folder, entry, form, onBytes) {
    const { ort, Tokenizer } = runtime;
    const { PieceTokenizer } = await import("./tokenizer.js");
    const [encoder, decoder, tokenizer] = await Promise.all([
      download(new URL(`${form}/encoder.onnx`, folder), onBytes),
      download(new URL(`${form}/decoder.onnx`, folder), onBytes),
      download(new URL("tokenizer.json", folder), onBytes),
    ]);
    const options = { executionProviders: ["wasm"] };
    const model = new Model();
    Object.assign(model, {
      ort,
      entry,
      form,
      encoder: await ort.InferenceSession.create(encoder, options),
      decoder: await ort.InferenceSession.create(decoder, options),
      tokenizer: new PieceTokenizer(Tokenizer, JSON.parse(new TextDecoder().decode(tokenizer)), entry.eos_id),
    });
    return model;
  }

  /** Run the encoder on one source (its ids, </s> included); a decoder state of one row. */
  async start(sourceIds) {
    const { ort, entry } = this;
    const ids = BigInt64Array.from(sourceIds, (id) => BigInt(id));
    const src = new ort.Tensor("int64", ids, [1, sourceIds.length]);
    const out = await this.encoder.run({ src });
    const empty = (dims) => new ort.Tensor("float32", new Float32Array(0), dims);
    return new GraphDecoder(this, {
      src,
      cross_keys: out.cross_keys,
      cross_values: out.cross_values,
      self_keys: empty([1, entry.n_layers, entry.n_heads, 0, entry.d_k]),
      self_values: empty([1, entry.n_layers, entry.n_heads, 0, entry.d_v]),
    });
  }

  /**
   * The encoder-decoder attention while the model writes `outputIds` (and </s>, when `ended`):
   * the output fed back one token at a time, as the recorded runs draw their maps.
   * @returns {Promise<Float32Array[]>} one (layers × h × S) array per piece written
   */
  async crossAttention(sourceIds, outputIds, ended) {
    const state = await this.start(sourceIds);
    const fed = [this.entry.bos_id, ...outputIds].slice(0, outputIds.length + (ended ? 1 : 0));
    const rows = [];
    for (const token of fed) {
      await state.step([token]);
      rows.push(state.crossAttention.data.slice());
    }
    return rows;
  }
}
