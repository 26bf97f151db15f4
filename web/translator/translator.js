// The translator page: the controls, what the page says at each moment, and the order of the
// work (load, check the input, search, draw). The model's files are fetched only when the reader
// asks for them, and each state the reader can reach is said in the status line; the outcome is
// also written into data- attributes of #translator, for tests and readers' own scripts.

import { drawHeatmap } from "./heatmap.js";
import { beamSearch, greedy } from "./search.js";

const BASE = new URL("./", import.meta.url);
const LANGUAGES = { de: "German", en: "English" };
const BEAM_SIZE = 4; // the paper's (§6.1); the length penalty is the model's own (export.json)
const EXTRA_LENGTH = 50; // an output may be this much longer than its input (§6.1)
const EXAMPLES = {
  de: [
    "Zwei Hunde spielen im Schnee.",
    "Ein Mann fährt mit dem Fahrrad über eine Brücke.",
    "Eine Frau mit einem roten Hut sitzt auf einer Bank und liest ein Buch.",
  ],
  en: [
    "Two dogs are playing in the snow.",
    "A man rides a bicycle across a bridge.",
    "A woman in a red hat is sitting on a bench reading a book.",
  ],
};

const $ = (id) => document.getElementById(id);
const root = $("translator");
const index = JSON.parse($("translator-index")?.textContent || "null");
const runtimeBytes = index?.runtime_bytes ?? 0;
const loaded = { runtime: null, models: new Map() }; // promises, so that nothing loads twice
let last = null; // the last translation, for redrawing its attention

function megabytes(bytes) {
  return `${(bytes / 1e6).toFixed(1)} MB`;
}

/** Say what is happening: `state` is idle, loading, ready, translating, done or error. */
function say(state, message) {
  root.dataset.state = state;
  $("translator-status").textContent = message;
  $("translator-run").disabled = state === "loading" || state === "translating";
  $("translator-load").disabled = state === "loading" || state === "translating";
}

function choice() {
  const [src, tgt] = $("translator-direction").value.split("-");
  const entry = Object.values(index.models).find((m) => m.src === src && m.tgt === tgt);
  return { src, tgt, entry, form: $("translator-weights").value, beam: $("translator-search").value === "beam" };
}

/** What the reader downloads for the chosen direction and weights, not yet downloaded. */
function toDownload({ entry, form }) {
  const model = ["encoder", "decoder"].reduce((sum, graph) => sum + entry.bytes[`${form}/${graph}.onnx`], 0);
  const tokenizer = entry.bytes["tokenizer.json"];
  const runtime = loaded.runtime ? 0 : runtimeBytes;
  const done = loaded.models.has(`${entry.model}/${form}`);
  return { runtime, model: done ? 0 : model, tokenizer: done ? 0 : tokenizer };
}

function describeDownload() {
  const chosen = choice();
  const { runtime, model, tokenizer } = toDownload(chosen);
  const total = runtime + model + tokenizer;
  const direction = `${LANGUAGES[chosen.src]} → ${LANGUAGES[chosen.tgt]}`;
  if (total === 0) return say("ready", `${direction} (${chosen.form}) is loaded: type a sentence and translate it.`);
  const parts = [runtime && `the runtime ${megabytes(runtime)}`, `the ${chosen.form} model ${megabytes(model + tokenizer)}`];
  const nothing = loaded.runtime === null && loaded.models.size === 0 ? "Nothing is downloaded yet. " : "";
  say(
    "idle",
    `${nothing}${direction} needs ${megabytes(total)} (${parts.filter(Boolean).join(", ")}); ` +
      "loading starts when you press Load or Translate.",
  );
}

/** The model of the chosen direction and weights, loading what is missing with progress. */
async function ensureModel(chosen) {
  const { runtime, model, tokenizer } = toDownload(chosen);
  const total = runtime + model + tokenizer;
  let received = 0;
  const started = performance.now();
  const progress = (bytes) => {
    received += bytes;
    say("loading", `Downloading ${megabytes(Math.min(received, total))} of ${megabytes(total)}…`);
  };
  if (total > 0) say("loading", `Downloading ${megabytes(0)} of ${megabytes(total)}…`);
  const { Model, loadRuntime } = await import("./model.js");
  loaded.runtime ??= loadRuntime(BASE, progress);
  const runtimeReady = await loaded.runtime;
  const key = `${chosen.entry.model}/${chosen.form}`;
  if (!loaded.models.has(key)) {
    const folder = new URL(`models/${chosen.entry.model}/`, BASE);
    loaded.models.set(key, Model.load(runtimeReady, folder, chosen.entry, chosen.form, progress));
  }
  const ready = await loaded.models.get(key);
  if (total > 0) root.dataset.loadMs = (performance.now() - started).toFixed(0);
  return ready;
}

async function load() {
  const chosen = choice();
  try {
    await ensureModel(chosen);
    describeDownload();
  } catch (error) {
    fail("The translator could not be loaded", error);
  }
}

function fail(what, error) {
  console.warn(error); // for the reader's console; the page says it in one sentence
  loaded.runtime = null;
  loaded.models.clear();
  say("error", `${what}: ${error.message || error}. Reload the page to try again.`);
}

async function translate() {
  const chosen = choice();
  const text = $("translator-input").value;
  say("translating", "Translating…"); // at once: what the reader sees now belongs to the new text
  for (const name of ["sourceIds", "targetIds", "ended", "searchMs", "attentionMs"]) delete root.dataset[name];
  $("translator-output").textContent = "";
  $("translator-attention").replaceChildren();
  last = null;
  if (!text.trim()) {
    return say("error", `Type a sentence in ${LANGUAGES[chosen.src]} first, or pick one of the examples.`);
  }
  let model;
  try {
    model = await ensureModel(chosen);
  } catch (error) {
    return fail("The translator could not be loaded", error);
  }
  const { entry, tokenizer } = model;
  const sourceIds = [...tokenizer.encode(text), entry.eos_id];
  if (sourceIds.length > entry.served_length) {
    return say(
      "error",
      `This text is ${sourceIds.length - 1} pieces long and the model reads at most ` +
        `${entry.served_length - 1}: translate it a sentence or two at a time.`,
    );
  }
  try {
    say("translating", `Translating ${sourceIds.length - 1} pieces…`);
    const maxLength = Math.min(sourceIds.length + EXTRA_LENGTH, entry.served_length);
    const started = performance.now();
    const state = await model.start(sourceIds);
    const found = chosen.beam
      ? await beamSearch(state, entry.bos_id, entry.eos_id, maxLength, BEAM_SIZE, entry.alpha)
      : await greedy(state, entry.bos_id, entry.eos_id, maxLength);
    const searchMs = performance.now() - started;
    const attention = await model.crossAttention(sourceIds, found.tokens, found.ended);
    const attentionMs = performance.now() - started - searchMs;
    last = { model, sourceIds, found, attention };
    $("translator-output").textContent = tokenizer.decode(found.tokens);
    Object.assign(root.dataset, {
      sourceIds: sourceIds.join(" "),
      targetIds: found.tokens.join(" "),
      ended: String(found.ended),
      searchMs: searchMs.toFixed(1),
      attentionMs: attentionMs.toFixed(1),
    });
    fillSelect($("translator-layer"), entry.n_layers, entry.n_layers);
    fillSelect($("translator-head"), entry.n_heads, 1);
    drawAttention();
    const search = chosen.beam ? `beam ${BEAM_SIZE}, α = ${entry.alpha}` : "greedy";
    say("done", `Translated in ${(searchMs / 1000).toFixed(2)} s (${search}, ${chosen.form} weights).`);
  } catch (error) {
    fail("The translation failed", error);
  }
}

/** Options 1..count, keeping the reader's choice when it still exists. */
function fillSelect(select, count, initial) {
  const kept = Number(select.value);
  select.replaceChildren(
    ...Array.from({ length: count }, (_, i) => new Option(String(i + 1), String(i + 1))),
  );
  select.value = String(kept >= 1 && kept <= count ? kept : initial);
  select.disabled = false;
}

function drawAttention() {
  if (!last) return;
  const { model, sourceIds, found, attention } = last;
  const { n_heads: heads } = model.entry;
  const layer = Number($("translator-layer").value) - 1;
  const head = Number($("translator-head").value) - 1;
  const columns = sourceIds.length;
  const written = found.ended ? [...found.tokens, model.entry.eos_id] : found.tokens;
  drawHeatmap($("translator-attention"), {
    rows: model.tokenizer.labels(written),
    columns: model.tokenizer.labels(sourceIds),
    weight: (row, column) => attention[row][(layer * heads + head) * columns + column],
    title: `Encoder-decoder attention, layer ${layer + 1}, head ${head + 1}`,
  });
}

function showExamples() {
  const { src } = choice();
  const list = $("translator-examples");
  list.replaceChildren(
    ...EXAMPLES[src].map((sentence) => {
      const button = document.createElement("button");
      button.type = "button";
      button.className = "translator-example";
      button.textContent = sentence;
      button.addEventListener("click", () => {
        $("translator-input").value = sentence;
      });
      return button;
    }),
  );
}

if (root && index && typeof WebAssembly === "object") {
  $("translator-run").addEventListener("click", translate);
  $("translator-input").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) translate(); // Ctrl+Enter
  });
  $("translator-load").addEventListener("click", load);
  $("translator-layer").addEventListener("change", drawAttention);
  $("translator-head").addEventListener("change", drawAttention);
  for (const id of ["translator-direction", "translator-weights"]) {
    $(id).addEventListener("change", () => {
      showExamples();
      describeDownload();
    });
  }
  // A direction whose model this build does not serve cannot be chosen.
  const direction = $("translator-direction");
  for (const option of direction.options) {
    const [src, tgt] = option.value.split("-");
    option.disabled = !Object.values(index.models).some((m) => m.src === src && m.tgt === tgt);
  }
  const offered = [...direction.options].find((option) => !option.disabled);
  if (direction.selectedOptions[0]?.disabled && offered) direction.value = offered.value;
  showExamples();
  if (offered) describeDownload();
  else say("error", "This build of the book serves no model for either direction.");
} else if (root) {
  root.dataset.state = "error";
  $("translator-status").textContent = index
    ? "This browser cannot run WebAssembly, which the translator needs: try a current browser."
    : "This build of the book has no translator models: build it with `make book`, which exports them.";
}
