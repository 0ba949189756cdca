// kvio serve driven by OpenAI's own client library (the npm openai
// package): streamed completions and chat completions, each event stamped
// as the library hands it over, logged as serve_load logs
// (request,response_id,event,kind,time_ns) for bench/serve_analyze.py.
//
//   node serve_openai.mjs PORT REQUESTS LOG [CONCURRENCY]
//
// CONCURRENCY (default 1) streams run at once, each taking the next
// request when its last ended. Before the measured requests each stream
// sends one short request that is not logged (its keep-alive connection
// opened and the library's code warm, as vllm bench serve's first test
// prompt), and the streams start 1 ms apart; answers are 32 to 64 tokens
// long (by the request's index) so that the streams do not all end, and
// start their next request, at the same step.
import OpenAI from "openai";
import { writeFileSync } from "node:fs";

const [port, count, log] = [process.argv[2], Number(process.argv[3]), process.argv[4]];
const concurrency = Number(process.argv[5] ?? 1);
const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: "kvio" });
const nowNs = () => BigInt(Math.round((performance.timeOrigin + performance.now()) * 1e6));
const lines = [];

// One streamed request; logged unless warm-up (index < 0).
async function one(index) {
  const warm = index < 0;
  const chat = !warm && index % 2 === 1;
  const words = Array.from({ length: warm ? 8 : 200 }, (_, i) => `word${index}x${i}`).join(" ");
  const tokens = warm ? 2 : concurrency > 1 ? 32 + ((index * 7) % 33) : 48;
  const send = nowNs();
  if (!warm) lines.push(`${index},-,-1,send,${send}`);
  const stream = chat
    ? await client.chat.completions.create({
        model: "llama3-8b", messages: [{ role: "user", content: words }],
        max_completion_tokens: tokens, stream: true, stream_options: { include_usage: true },
        ignore_eos: true })
    : await client.completions.create({
        model: "llama3-8b", prompt: words, max_tokens: tokens, stream: true,
        stream_options: { include_usage: true }, ignore_eos: true });
  let event = 0;
  for await (const chunk of stream) {
    const time = nowNs();
    const choice = chunk.choices[0];
    // vLLM's chat role chunk rides with the first token's: one step.
    if (warm || (chat && choice && choice.delta && choice.delta.role)) continue;
    lines.push(`${index},${chunk.id},${event++},${choice ? "token" : "usage"},${time}`);
  }
}

const streams = Math.min(concurrency, count);
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
await Promise.all(Array.from({ length: streams }, (_, k) => one(-1 - k)));
let next = 0;
async function worker(k) {
  await sleep(k);
  while (next < count) await one(next++);
}
await Promise.all(Array.from({ length: streams }, (_, k) => worker(k)));
writeFileSync(log, lines.join("\n") + "\n");
