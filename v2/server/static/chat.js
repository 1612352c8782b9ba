// Chat mode: the page of a chat card (GET /v1/models says `chat`: it speaks its own reply, never a given text).
// A turn is typed, recorded, or both (the recording sent as an `input_audio` part, a wav made here from the
// microphone's samples); it goes to POST /v1/chat/completions with `stream: true` and, when "speak the reply" is
// ticked, `modalities: ["text", "audio"]`; the reply's text (`delta.content`, or `delta.audio.transcript`) is
// written into the conversation as it arrives and its voice (`delta.audio.data`, pcm16 at 24 kHz) is scheduled
// on Web Audio as it arrives. The conversation is kept here: each reply joins it as the assistant's turn (its
// transcript), so the next turn is answered in context. Stop aborts the request (the server cancels it).
// Must not know: the speech route, the voice store's writes.
"use strict";

import { $, authHeaders, errorText, setStatus } from "./util.js";
import { PcmPlayer, channelsOf, clearWhole, showWhole, wavBlob } from "./audio.js";

const RATE = 24000;         // OpenAI's pcm16: 24 kHz mono s16le
const history = [];         // the conversation so far: OpenAI's messages
let model = null;
let current = null;         // the turn in flight: { controller, player }
let recording = null;       // { ctx, stream, node, parts }
let recorded = null;        // { data: base64 wav, seconds }

// Show the chat section in place of the speech form (the API key field moves with it) and fill its voices.
export async function startChat(served) {
  if (model !== null) return;
  model = served;
  const keep = new Set(["chat", "seeded-note"]);
  for (const el of $("page").children) {
    if (el.tagName !== "H1" && !keep.has(el.id)) el.hidden = true;
  }
  $("chat-key").append($("api-key").closest("label"));
  $("chat").hidden = false;
  $("page").dataset.mode = "chat";
  $("chat-send").addEventListener("click", send);
  $("chat-stop").addEventListener("click", stop);
  $("chat-record").addEventListener("click", toggleRecording);
  await loadSpeakers();
}

async function loadSpeakers() {
  const resp = await fetch("/v1/audio/voices", { headers: authHeaders() }).catch(() => null);
  if (!resp || !resp.ok) return;
  const select = $("chat-voice");
  for (const v of (await resp.json()).voices) {
    if (v.kind === "speaker") select.append(new Option(v.name, v.id));  // the checkpoint's speakers
  }
}

function bubble(role, text) {
  const li = document.createElement("li");
  li.className = role;
  li.dataset.role = role;
  li.textContent = text;
  $("chat-log").append(li);
  return li;
}

function base64Of(bytes) {
  let s = "";
  for (let i = 0; i < bytes.length; i += 32768) s += String.fromCharCode.apply(null, bytes.subarray(i, i + 32768));
  return btoa(s);
}

// The microphone's samples, kept as they come (mono), until the button is pressed again: then a wav.
async function toggleRecording() {
  if (recording) {
    const { ctx, stream, node, parts } = recording;
    recording = null;
    node.disconnect();
    stream.getTracks().forEach((t) => t.stop());
    const length = parts.reduce((n, p) => n + p.length, 0);
    const pcm = new Int16Array(length);
    let at = 0;
    for (const p of parts) {
      for (let i = 0; i < p.length; i++) pcm[at + i] = Math.max(-32768, Math.min(32767, Math.round(p[i] * 32767)));
      at += p.length;
    }
    const wav = new Uint8Array(await wavBlob(new Uint8Array(pcm.buffer), ctx.sampleRate, 1).arrayBuffer());
    recorded = { data: base64Of(wav), seconds: length / ctx.sampleRate };
    ctx.close();
    $("chat-record").textContent = "Record";
    $("chat-recorded").textContent = `Recorded ${recorded.seconds.toFixed(1)} s: sent with the next turn.`;
    return;
  }
  try {
    const stream = await navigator.mediaDevices.getUserMedia({ audio: true });
    const ctx = new AudioContext();
    const source = ctx.createMediaStreamSource(stream);
    const node = ctx.createScriptProcessor(4096, 1, 1);
    const parts = [];
    let samples = 0;
    node.onaudioprocess = (e) => {
      parts.push(new Float32Array(e.inputBuffer.getChannelData(0)));
      samples += e.inputBuffer.length;
      $("chat-recorded").dataset.seconds = (samples / ctx.sampleRate).toFixed(2);
      $("chat-recorded").textContent = `Recording... ${(samples / ctx.sampleRate).toFixed(1)} s`;
    };
    source.connect(node);
    node.connect(ctx.destination);
    recording = { ctx, stream, node, parts };
    $("chat-record").textContent = "Stop recording";
    $("chat-recorded").textContent = "Recording...";
  } catch (e) {
    setStatus("chat-status", "error", `No microphone: ${e.message}`);
  }
}

function userTurn(text) {
  const parts = [];
  if (recorded) parts.push({ type: "input_audio", input_audio: { data: recorded.data, format: "wav" } });
  if (text) parts.push({ type: "text", text });
  return parts.length === 1 && parts[0].type === "text" ? { role: "user", content: text } : { role: "user", content: parts };
}

function body(turn) {
  const out = { model, messages: [...history, turn], stream: true };
  const seed = $("chat-seed").value;
  if (seed !== "") out.seed = Number(seed);
  const cap = $("chat-max-tokens").value;
  if (cap !== "") out.max_completion_tokens = Number(cap);
  if ($("chat-spoken").checked) {
    out.modalities = ["text", "audio"];
    out.audio = { voice: $("chat-voice").value, format: "wav" };
  }
  return out;
}

async function send() {
  const text = $("chat-text").value.trim();
  if ((!text && !recorded) || current) return;
  const turn = userTurn(text);
  bubble("user", (recorded ? `[${recorded.seconds.toFixed(1)} s of audio] ` : "") + text);
  clearWhole();
  const controller = new AbortController();
  const player = $("chat-spoken").checked ? new PcmPlayer(RATE, 1) : null;
  current = { controller, player };
  const reply = bubble("assistant", "");
  const pcm = [];
  setStatus("chat-status", "running", "Answering...");
  try {
    const resp = await fetch("/v1/chat/completions", {
      method: "POST", headers: { "Content-Type": "application/json", ...authHeaders() },
      body: JSON.stringify(body(turn)), signal: controller.signal });
    if (!resp.ok) throw new Error(await errorText(resp));
    const finish = await readChunks(resp, (delta) => {
      const said = delta.content || (delta.audio && delta.audio.transcript);
      if (said) reply.textContent += said;
      if (delta.audio && delta.audio.data) {
        const bytes = Uint8Array.from(atob(delta.audio.data), (c) => c.charCodeAt(0));
        pcm.push(bytes);
        if (player) player.push(new Int16Array(bytes.buffer, 0, bytes.length >> 1));
      }
    });
    history.push(turn, { role: "assistant", content: reply.textContent });
    $("chat-text").value = "";
    recorded = null;
    $("chat-recorded").textContent = "";
    if (player) player.finish();
    offer(pcm);
    setStatus("chat-status", "done", `Done (${finish}).`);
  } catch (e) {
    reply.remove();
    if (player) player.stop();
    setStatus("chat-status", e.name === "AbortError" ? "stopped" : "error",
              e.name === "AbortError" ? "Stopped." : String(e.message || e));
  } finally {
    current = null;
  }
}

// Each SSE block's chunk to `onDelta`; the finish_reason, once [DONE] comes; an error block throws.
async function readChunks(resp, onDelta) {
  const reader = resp.body.getReader();
  const decoder = new TextDecoder();
  let text = "", finish = null;
  for (;;) {
    const { value, done } = await reader.read();
    if (done) throw new Error("the answer ended before [DONE]");
    text += decoder.decode(value, { stream: true });
    let end;
    while ((end = text.indexOf("\n\n")) >= 0) {
      const block = text.slice(0, end);
      text = text.slice(end + 2);
      if (!block.startsWith("data: ")) continue;
      const data = block.slice(6);
      if (data === "[DONE]") return finish;
      const chunk = JSON.parse(data);
      if (chunk.error) throw new Error(`Error (${chunk.error.code}): ${chunk.error.message}`);
      const choice = chunk.choices && chunk.choices[0];
      if (!choice) continue;
      if (choice.finish_reason) finish = choice.finish_reason;
      onDelta(choice.delta || {});
    }
  }
}

function offer(pcm) {
  const length = pcm.reduce((n, p) => n + p.length, 0);
  if (length === 0) return;
  const all = new Uint8Array(length);
  let at = 0;
  for (const p of pcm) { all.set(p, at); at += p.length; }
  $("chat").dataset.audioBytes = String(length);
  const wav = wavBlob(all, RATE, 1);
  showWhole({ file: wav, filename: "reply.wav", playable: wav, channels: channelsOf(all, 1) });
  $("page").append($("result"));  // the result section shows under the chat
  $("result").hidden = false;
}

function stop() {
  if (current) {
    current.controller.abort();
    if (current.player) current.player.stop();
  }
}
