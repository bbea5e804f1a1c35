// The demo's calculator task (examples/calc_agent) as a Node.js program: no agl-stream code in it.
//
// It uses only what the rollout controller hands every attempt (docs/controller.md):
// - the task from AGL_TASK_FILE, or AGL_TASK_JSON in a Kubernetes Job ({"input": {"question", "answer"}, ...});
// - the model through the official `openai` package, which reads OPENAI_BASE_URL and OPENAI_API_KEY
//   (the proxy's route for this attempt: every call is recorded with its token ids) and AGENT_MODEL;
// - the reward: written to AGL_REWARD_FILE where the controller runs the command locally, else posted as
//   upstream v1.0's event to AGL_EVENT_URL (a Kubernetes Job shares no disk with the controller).
//
// The protocol is the Python agent's: the model may reply `CALC <expression>`; the agent evaluates it
// (a small parser, never eval) and sends `RESULT <value>` back; the model's next reply is the answer.
// The reward is 1 when the final reply's last integer is the answer, else 0.
//
//   agl-stream controller --env AGENT_MODEL=smollm2 -- node examples/js_calc_agent/agent.mjs

import { readFileSync, writeFileSync } from "node:fs";
import OpenAI from "openai";

export const SYSTEM_PROMPT =
  "You are a math assistant with a calculator. To use it, reply with one line: CALC <expression>. " +
  "You get RESULT <value> back. Then reply with only the final number.";
const FEW_SHOT = [
  { role: "user", content: "What is 417 * 23?" },
  { role: "assistant", content: "CALC 417 * 23" },
  { role: "user", content: "RESULT 9591" },
  { role: "assistant", content: "9591" },
];
const CALL = /^\s*CALC\s+([-+*/().\d\s]+?)\s*$/m;

// Arithmetic with + - * / and parentheses, by recursive descent; null for anything else.
export function calculate(expression) {
  const tokens = expression.match(/\d+(?:\.\d+)?|[-+*/()]|\S/g) ?? [];
  let at = 0;
  const peek = () => tokens[at];
  const number = () => {
    const token = tokens[at++];
    if (token === "(") {
      const value = sum();
      if (tokens[at++] !== ")") throw new Error("unbalanced parentheses");
      return value;
    }
    if (token === "-") return -number();
    if (token === undefined || !/^\d/.test(token)) throw new Error(`unexpected ${token}`);
    return Number(token);
  };
  const product = () => {
    let value = number();
    while (peek() === "*" || peek() === "/") {
      const op = tokens[at++];
      const right = number();
      value = op === "*" ? value * right : value / right;
    }
    return value;
  };
  const sum = () => {
    let value = product();
    while (peek() === "+" || peek() === "-") {
      const op = tokens[at++];
      const right = product();
      value = op === "+" ? value + right : value - right;
    }
    return value;
  };
  try {
    const value = sum();
    if (at !== tokens.length || !Number.isFinite(value)) return null;
    return Number.isInteger(value) ? String(value) : String(Number(value.toFixed(6)));
  } catch {
    return null;
  }
}

export function isCorrect(reply, answer) {
  const integers = (reply ?? "").match(/-?\d+/g);
  return integers !== null && integers[integers.length - 1] === String(answer).trim();
}

async function solve(client, model, question) {
  const params = { model, max_tokens: 16, temperature: 1.0 };
  const messages = [{ role: "system", content: SYSTEM_PROMPT }, ...FEW_SHOT, { role: "user", content: question }];
  const first = (await client.chat.completions.create({ ...params, messages })).choices[0].message.content ?? "";
  const call = CALL.exec(first);
  const result = call ? calculate(call[1]) : null;
  if (result === null) return first;
  messages.push({ role: "assistant", content: first.trim() }, { role: "user", content: `RESULT ${result}` });
  return (await client.chat.completions.create({ ...params, messages })).choices[0].message.content ?? "";
}

async function report(reward) {
  if (process.env.AGL_REWARD_FILE) {
    writeFileSync(process.env.AGL_REWARD_FILE, String(reward));
    return;
  }
  const response = await fetch(process.env.AGL_EVENT_URL, {
    method: "POST",
    headers: { "Content-Type": "application/json", Authorization: `Bearer ${process.env.OPENAI_API_KEY}` },
    body: JSON.stringify({ event_type: "reward", data: { value: reward } }),
  });
  if (!response.ok) throw new Error(`the reward was refused: ${response.status} ${await response.text()}`);
}

async function main() {
  // a local attempt has the task in a file; a Kubernetes Job in AGL_TASK_JSON
  const task = JSON.parse(process.env.AGL_TASK_JSON ?? readFileSync(process.env.AGL_TASK_FILE, "utf8"));
  const client = new OpenAI({ maxRetries: 2, timeout: 300_000 });
  const reply = await solve(client, process.env.AGENT_MODEL ?? "smollm2", String(task.input.question));
  const reward = isCorrect(reply, task.input.answer) ? 1 : 0;
  console.log(JSON.stringify({ question: task.input.question, reply, reward }));
  await report(reward);
}

if (import.meta.url === `file://${process.argv[1]}`) {
  main().catch((error) => {
    console.error(error);
    process.exit(1);
  });
}
