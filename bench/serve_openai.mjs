// kvio serve driven by OpenAI's own client library (the npm openai
// package): streamed completions and chat completions, each event stamped
// as the library hands it over, logged as serve_load logs
// (request,response_id,event,kind,time_ns) for bench/serve_analyze.py.
//
//   node serve_openai.mjs PORT REQUESTS LOG [CONCURRENCY]
//
// CONCURRENCY (default 1) streams run at once, each taking the next
// request when its last ended.
import OpenAI from "openai";
import { writeFileSync } from "node:fs";

const [port, count, log] = [process.argv[2], Number(process.argv[3]), process.argv[4]];
const concurrency = Number(process.argv[5] ?? 1);
const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: "kvio" });
const nowNs = () => BigInt(Math.round((performance.timeOrigin + performance.now()) * 1e6));
const lines = [];

async function one(index) {
  const chat = index % 2 === 1;
  const words = Array.from({ length: 200 }, (_, i) => `word${index}x${i}`).join(" ");
  const send = nowNs();
  lines.push(`${index},-,-1,send,${send}`);
  const stream = chat
    ? await client.chat.completions.create({
        model: "llama3-8b", messages: [{ role: "user", content: words }],
        max_completion_tokens: 48, stream: true, stream_options: { include_usage: true },
        ignore_eos: true })
    : await client.completions.create({
        model: "llama3-8b", prompt: words, max_tokens: 48, stream: true,
        stream_options: { include_usage: true }, ignore_eos: true });
  let event = 0;
  for await (const chunk of stream) {
    const time = nowNs();
    const choice = chunk.choices[0];
    // vLLM's chat role chunk rides with the first token's: one step.
    if (chat && choice && choice.delta && choice.delta.role) continue;
    lines.push(`${index},${chunk.id},${event++},${choice ? "token" : "usage"},${time}`);
  }
}

let next = 0;
async function worker() {
  while (next < count) await one(next++);
}
await Promise.all(Array.from({ length: Math.min(concurrency, count) }, worker));
writeFileSync(log, lines.join("\n") + "\n");
