// The playground page: synthesise through POST /v1/audio/speech and play as the bytes arrive (Web Audio).
// pcm and wav are streamed and scheduled chunk by chunk; the compressed formats play once complete. When a
// request is done, the whole audio is offered in a player, as a download and as a waveform (audio.js).
// The sampling knobs left empty keep the card's settings; a reference recording clones (voices.js).
// ?text=...&format=...&seed=...&max_frames=...&temperature=...&top_p=...&top_k=...&repetition_penalty=...
// &voice=...&autorun=1 fills the form and speaks on load.
"use strict";

import { $, authHeaders, errorText, setStatus } from "./util.js";
import { Player, channelsOf, showWhole, wavBlob } from "./audio.js";
import { loadVoices, referenceFields, wireVoices } from "./voices.js";

// [input id, request field = query parameter]: numbers, sent only when filled in
const KNOBS = [["seed", "seed"], ["max-frames", "max_frames"], ["temperature", "temperature"], ["top-p", "top_p"],
               ["top-k", "top_k"], ["repetition-penalty", "repetition_penalty"]];
const params = new URLSearchParams(location.search);
let current = null;

async function request(format) {
  const body = { input: $("text").value, response_format: format };
  for (const [id, field] of KNOBS) {
    const value = $(id).value.trim();
    if (value !== "") body[field] = Number(value);
  }
  const reference = await referenceFields();
  if (reference) Object.assign(body, reference);  // cloning from the recording: no stored voice
  else if ($("voice").value) body.voice = $("voice").value;
  if (format === "pcm" || format === "wav") body.stream_format = "audio";
  else body.stream = false;  // played once complete: the whole file, whose header lets the decoder trim its delay
  if (format === "pcm") body.sample_rate = 48000;
  return body;
}

function show(stats) {
  $("ttfa").textContent = stats.ttfa === null ? "–" : stats.ttfa.toFixed(0) + " ms";
  $("audio-seconds").textContent = stats.seconds.toFixed(3) + " s";
  $("audio-seconds").dataset.seconds = stats.seconds.toFixed(6);
  $("bytes").textContent = String(stats.bytes);
  $("reads").textContent = String(stats.reads);
}

function concat(parts, length) {
  const out = new Uint8Array(length);
  let at = 0;
  for (const p of parts) { out.set(p, at); at += p.length; }
  return out;
}

async function streamed(resp, format, stats, t0) {
  const rate = Number(resp.headers.get("X-Sample-Rate")), channels = Number(resp.headers.get("X-Channels"));
  const player = new Player(rate, channels);
  const frameBytes = 2 * channels;
  let skip = format === "wav" ? 44 : 0, carry = new Uint8Array(0), frames = 0, kept = 0;
  const parts = [];  // every sample's bytes, for the whole audio at the end
  const reader = resp.body.getReader();
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      stats.reads += 1;
      stats.bytes += value.length;
      let bytes = new Uint8Array(carry.length + value.length);
      bytes.set(carry); bytes.set(value, carry.length);
      const drop = Math.min(skip, bytes.length);
      bytes = bytes.subarray(drop); skip -= drop;
      const usable = bytes.length - (bytes.length % frameBytes);
      carry = bytes.slice(usable);
      if (usable === 0) continue;
      if (stats.ttfa === null) stats.ttfa = performance.now() - t0;
      parts.push(bytes.slice(0, usable));
      kept += usable;
      const view = new DataView(bytes.buffer, bytes.byteOffset, usable);
      const samples = new Int16Array(usable / 2);
      for (let i = 0; i < samples.length; i++) samples[i] = view.getInt16(2 * i, true);
      frames += samples.length / channels;
      stats.seconds = frames / rate;
      player.push(samples);
      show(stats);
    }
  } finally {
    $("audio-seconds").dataset.played = player.scheduled.toFixed(6);  // handed to Web Audio
    setTimeout(() => player.close(), Math.max(0, (player.at - (player.ctx ? player.ctx.currentTime : 0)) * 1000) + 500);
  }
  const pcm = concat(parts, kept);
  const wav = wavBlob(pcm, rate, channels);  // for wav: the streamed header's open sizes filled in
  const file = format === "pcm" ? new Blob([pcm], { type: "audio/pcm" }) : wav;
  showWhole({ file, filename: "speech." + format, playable: wav, channels: channelsOf(pcm, channels) });
}

async function whole(resp, format, stats, t0) {
  const data = await resp.arrayBuffer();
  stats.ttfa = performance.now() - t0;
  stats.bytes = data.byteLength; stats.reads = 1;
  const file = new Blob([data], { type: resp.headers.get("Content-Type") || "audio/mpeg" });
  let channels = [];
  try {
    const ctx = new AudioContext();
    const buffer = await ctx.decodeAudioData(data.slice(0));
    stats.seconds = buffer.duration;
    channels = Array.from({ length: buffer.numberOfChannels }, (_, c) => buffer.getChannelData(c));
    const src = ctx.createBufferSource();
    src.buffer = buffer; src.connect(ctx.destination); src.start();
  } catch (e) {
    stats.seconds = Number(resp.headers.get("X-Audio-Seconds") || 0);
  }
  showWhole({ file, filename: "speech." + format, playable: file, channels });
  show(stats);
}

async function speak() {
  if (current) current.abort();
  const controller = new AbortController();
  current = controller;
  const format = $("format").value;
  const stats = { ttfa: null, seconds: 0, bytes: 0, reads: 0 };
  show(stats);
  setStatus("status", "running", "Speaking…");
  const t0 = performance.now();
  try {
    const resp = await fetch("/v1/audio/speech", {
      method: "POST", signal: controller.signal,
      headers: { "Content-Type": "application/json", ...authHeaders() },
      body: JSON.stringify(await request(format)),
    });
    if (!resp.ok) {
      setStatus("status", "error", await errorText(resp));
      return;
    }
    if (format === "pcm" || format === "wav") await streamed(resp, format, stats, t0);
    else await whole(resp, format, stats, t0);
    show(stats);
    setStatus("status", "done", `Done: ${stats.seconds.toFixed(3)} s of audio.`);
  } catch (e) {
    const stopped = e.name === "AbortError";
    setStatus("status", stopped ? "stopped" : "error", stopped ? "Stopped." : String(e));
  } finally {
    if (current === controller) current = null;
  }
}

$("speak").addEventListener("click", speak);
$("stop").addEventListener("click", () => { if (current) current.abort(); });
wireVoices();

(async () => {
  await loadVoices();
  if (params.has("text")) $("text").value = params.get("text");
  if (params.has("format")) $("format").value = params.get("format");
  for (const [id, field] of KNOBS) if (params.has(field)) $(id).value = params.get(field);
  if (params.has("voice")) $("voice").value = params.get("voice");
  $("page").dataset.ready = "1";
  if (params.get("autorun") === "1") speak();
})();
