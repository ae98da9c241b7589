// redrafter serve against the official OpenAI Node client (npm openai 6.x,
// pinned in package-lock.json; scripts/deps.sh installs it with npm ci).
// It builds the redrafter binary, starts it on a loopback port with the
// bundled demo model, and holds every greedy answer to what
// `redrafter generate` prints for the same prompt. Run: node --test.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { execFileSync, spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import OpenAI from "openai";

const root = resolve(import.meta.dirname, "../..");
const model = join(root, "models/stories260K/stories260K.gguf");
const drafter = join(root, "models/stories260K/drafter");
const key = "node-test-key";
// The vicuna template's system prompt: the demo model has no template.
const vicunaSystem =
  "A chat between a curious user and an artificial intelligence assistant. " +
  "The assistant gives helpful, detailed, and polite answers to the user's questions.";

let dir, bin;

before(() => {
  dir = mkdtempSync(join(tmpdir(), "redrafter-node-"));
  bin = join(dir, "redrafter");
  execFileSync("go", ["build", "-o", bin, "./cmd/redrafter"], { cwd: root, stdio: "inherit" });
});

after(() => rmSync(dir, { recursive: true, force: true }));

// serve starts `redrafter serve` on a free port; stop() sends SIGTERM and
// resolves with the exit code.
async function serve(withDrafter, ...args) {
  args = ["serve", "--backend", "cpu", "-m", model, "--port", "0", ...args];
  if (withDrafter) args.push("--drafter", drafter);
  const proc = spawn(bin, args, { env: { ...process.env, REDRAFTER_API_KEY: key }, stdio: ["ignore", "ignore", "pipe"] });
  let logs = "";
  const addr = await new Promise((ok, fail) => {
    const timer = setTimeout(() => fail(new Error("serve did not start:\n" + logs)), 60000);
    proc.stderr.on("data", (d) => {
      logs += d;
      const m = logs.match(/msg=listening addr=(\S+)/);
      if (m) {
        clearTimeout(timer);
        ok(m[1]);
      }
    });
    proc.on("exit", (code) => fail(new Error(`serve exited ${code}:\n${logs}`)));
  });
  const url = `http://${addr}`;
  const client = new OpenAI({ baseURL: url + "/v1", apiKey: key, maxRetries: 0 });
  const stop = () =>
    new Promise((ok) => {
      proc.removeAllListeners("exit");
      proc.on("exit", (code) => ok({ code, logs }));
      proc.kill("SIGTERM");
    });
  return { url, client, stop };
}

const generated = new Map();
// generate is `redrafter generate`'s greedy text for prompt.
function generate(prompt, maxTokens, withDrafter) {
  const k = JSON.stringify([prompt, maxTokens, withDrafter]);
  if (!generated.has(k)) {
    const args = ["generate", "--backend", "cpu", "-m", model, "-p", prompt, "-n", String(maxTokens)];
    if (withDrafter) args.push("--drafter", drafter);
    generated.set(k, execFileSync(bin, args, { encoding: "utf8" }).replace(/\n$/, ""));
  }
  return generated.get(k);
}

const chat = (user, max_tokens, extra = {}) => ({
  model: "stories260K",
  messages: [{ role: "user", content: user }],
  max_tokens,
  temperature: 0,
  ...extra,
});
const completion = (prompt, max_tokens, extra = {}) => ({ model: "stories260K", prompt, max_tokens, temperature: 0, ...extra });

async function stopped(s) {
  const { code, logs } = await s.stop();
  assert.equal(code, 0, "serve after SIGTERM:\n" + logs);
}

for (const withDrafter of [false, true]) {
  test(`chat, completions, streams and models (drafter=${withDrafter})`, async () => {
    const s = await serve(withDrafter);
    try {
      const user = "Tell me a story about a dog.";
      const want = generate(`${vicunaSystem} USER: ${user} ASSISTANT:`, 40, withDrafter);

      const r = await s.client.chat.completions.create(chat(user, 40));
      assert.equal(r.choices[0].message.content, want);
      assert.equal(r.choices[0].finish_reason, "length");
      assert.equal(r.usage.completion_tokens, 40);
      assert.equal(r.redrafter.tokens_per_step > 0, withDrafter);

      const stream = await s.client.chat.completions.create(chat(user, 40, { stream: true, stream_options: { include_usage: true } }));
      let text = "";
      let usage;
      for await (const chunk of stream) {
        if (chunk.choices.length) text += chunk.choices[0].delta.content ?? "";
        if (chunk.usage) usage = chunk.usage;
      }
      assert.equal(text, want);
      assert.equal(usage.completion_tokens, 40);

      const wantC = generate("Once upon a time", 30, withDrafter);
      const c = await s.client.completions.create(completion("Once upon a time", 30));
      assert.equal(c.choices[0].text, wantC);
      let streamed = "";
      for await (const chunk of await s.client.completions.create(completion("Once upon a time", 30, { stream: true }))) {
        if (chunk.choices.length) streamed += chunk.choices[0].text;
      }
      assert.equal(streamed, wantC);

      const models = [];
      for await (const m of s.client.models.list()) models.push(m.id);
      assert.deepEqual(models, ["stories260K"]);
    } finally {
      await stopped(s);
    }
  });
}

test("a wrong key is a 401", async () => {
  const s = await serve(false);
  try {
    const bad = new OpenAI({ baseURL: s.url + "/v1", apiKey: "wrong", maxRetries: 0 });
    await assert.rejects(bad.chat.completions.create(chat("Hi", 5)), (err) => {
      assert.ok(err instanceof OpenAI.AuthenticationError, String(err));
      assert.equal(err.status, 401);
      assert.equal(err.code, "invalid_api_key");
      return true;
    });
  } finally {
    await stopped(s);
  }
});

async function busy(url) {
  const r = await fetch(url + "/health");
  return (await r.json()).slots_busy;
}

test("a cancelled stream frees its slot", async () => {
  const s = await serve(true, "--parallel", "1");
  try {
    const stream = await s.client.chat.completions.create({
      model: "stories260K",
      messages: [{ role: "user", content: "Tell me a long story." }],
      temperature: 0,
      stop: "zzzz",
      stream: true,
    });
    // Abort after the first chunk and leave the loop: chunks the client had
    // already read off the socket would still be yielded after the abort
    // (CI once saw two), so the loop must not wait for the iteration to end.
    let first;
    for await (const chunk of stream) {
      first = chunk;
      stream.controller.abort();
      break;
    }
    assert.equal(first?.choices[0]?.delta?.role, "assistant");
    const deadline = Date.now() + 20000;
    while ((await busy(s.url)) !== 0) {
      assert.ok(Date.now() < deadline, "the slot is still busy 20 s after the client left");
      await new Promise((ok) => setTimeout(ok, 10));
    }
    // The generation was cancelled, not run to the end of the context.
    const metrics = await (await fetch(s.url + "/metrics", { headers: { Authorization: `Bearer ${key}` } })).text();
    assert.match(metrics, /^redrafter_generations_total\{reason="canceled"\} 1$/m);
    const c = await s.client.completions.create(completion("Once upon a time", 20));
    assert.equal(c.choices[0].text, generate("Once upon a time", 20, true));
  } finally {
    await stopped(s);
  }
});

for (const withDrafter of [false, true]) {
  test(`8 concurrent clients get their greedy text (drafter=${withDrafter})`, async () => {
    const prompts = ["Once upon a time", "Lily and Tom", "The cat", "One day, a little girl", "Tim had a big red ball", "The sun", "Mom said", "A bird"];
    const want = prompts.map((p) => generate(p, 32, withDrafter));
    const s = await serve(withDrafter, "--parallel", "4");
    try {
      const got = await Promise.all(
        prompts.map(async (p, i) => {
          if (i % 2 === 0) return (await s.client.completions.create(completion(p, 32))).choices[0].text;
          let text = "";
          for await (const chunk of await s.client.completions.create(completion(p, 32, { stream: true }))) {
            if (chunk.choices.length) text += chunk.choices[0].text;
          }
          return text;
        }),
      );
      assert.deepEqual(got, want);
    } finally {
      await stopped(s);
    }
  });
}
