// The reference side of bench/tokenizer.sh: encodes the same documents
// with an npm tokenizer (gpt-tokenizer or js-tiktoken for a tiktoken
// encoding, as tiktoken's encode_ordinary does; Hugging Face's
// tokenizers.js for a tokenizer.json), writes each document's ids to a line
// of OUT and prints `bytes N seconds S` (the encoding alone, best of
// ROUNDS passes). The packages are under $KVIO_NPM_DIR/node_modules.
// usage: node tokenizer_ref.mjs gpt-tokenizer|js-tiktoken|tokenizers.js
//            ENCODING|TOKENIZER.json DOCS.jsonl OUT [ROUNDS]
import { readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';

const [library, encoding, docsPath, outPath, roundsArg] = process.argv.slice(2);
const rounds = Number(roundsArg ?? 3);
const require = createRequire(process.env.KVIO_NPM_DIR + '/');
const docs = readFileSync(docsPath, 'utf8').split('\n').filter((line) => line.length > 0)
    .map((line) => JSON.parse(line));
const bytes = docs.reduce((sum, doc) => sum + Buffer.byteLength(doc, 'utf8'), 0);

let encode;
if (library === 'gpt-tokenizer') {
    const api = require(`gpt-tokenizer/cjs/encoding/${encoding}`);
    encode = (text) => api.encode(text, { disallowedSpecial: new Set() });
} else if (library === 'tokenizers.js') {
    const { Tokenizer } = require('@huggingface/tokenizers');
    const tokenizer = new Tokenizer(JSON.parse(readFileSync(encoding, 'utf8')), {});
    encode = (text) => tokenizer.encode(text, { add_special_tokens: false }).ids;
} else {
    const { getEncoding } = require('js-tiktoken');
    const tiktoken = getEncoding(encoding);
    encode = (text) => tiktoken.encode(text, [], []);
}

let best = Infinity;
let encoded = [];
for (let round = 0; round < rounds; round++) {
    const start = process.hrtime.bigint();
    encoded = docs.map(encode);
    const took = Number(process.hrtime.bigint() - start) / 1e9;
    best = Math.min(best, took);
}
writeFileSync(outPath, encoded.map((ids) => ids.join(' ')).join('\n') + '\n');
console.log(`bytes ${bytes} seconds ${best.toFixed(6)}`);
