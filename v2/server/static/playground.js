// The playground page: synthesise through POST /v1/audio/speech and play as the bytes arrive (Web Audio).
// pcm and wav are streamed and scheduled chunk by chunk; the compressed formats play once complete.
// ?text=...&format=...&seed=...&max_frames=...&autorun=1 fills the form and speaks on load.
"use strict";

const $ = (id) => document.getElementById(id);
const params = new URLSearchParams(location.search);
let current = null;

function authHeaders() {
  const key = $("api-key").value.trim();
  return key ? { Authorization: "Bearer " + key } : {};
}

function setStatus(state, text) {
  $("status").dataset.state = state;
  $("status").textContent = text;
}

async function loadVoices() {
  try {
    const resp = await fetch("/v1/audio/voices", { headers: authHeaders() });
    if (!resp.ok) return;
    const { voices } = await resp.json();
    for (const v of voices) {
      const opt = document.createElement("option");
      opt.value = v.id;
      opt.textContent = v.kind === "builtin" ? v.name + " (default voice)" : v.name;
      $("voice").appendChild(opt);
    }
  } catch (e) { /* the list stays at "default" */ }
}

class Player {
  // Schedules s16 interleaved samples back to back on one AudioContext.
  constructor(rate, channels) {
    this.rate = rate; this.channels = channels; this.at = 0; this.scheduled = 0;
    try { this.ctx = new AudioContext({ sampleRate: rate }); } catch (e) { this.ctx = null; }
  }
  push(samples) {
    if (!this.ctx || samples.length === 0) return;
    const frames = samples.length / this.channels;
    const buffer = this.ctx.createBuffer(this.channels, frames, this.rate);
    for (let c = 0; c < this.channels; c++) {
      const out = buffer.getChannelData(c);
      for (let i = 0; i < frames; i++) out[i] = samples[i * this.channels + c] / 32768;
    }
    const src = this.ctx.createBufferSource();
    src.buffer = buffer;
    src.connect(this.ctx.destination);
    this.at = Math.max(this.at, this.ctx.currentTime + 0.05);
    src.start(this.at);
    this.at += buffer.duration;
    this.scheduled += buffer.duration;
  }
  close() { if (this.ctx) this.ctx.close(); }
}

function request(format) {
  const body = { input: $("text").value, response_format: format, seed: Number($("seed").value || 0) };
  if ($("voice").value) body.voice = $("voice").value;
  if ($("max-frames").value) body.max_frames = Number($("max-frames").value);
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

async function streamed(resp, format, stats, t0) {
  const rate = Number(resp.headers.get("X-Sample-Rate")), channels = Number(resp.headers.get("X-Channels"));
  const player = new Player(rate, channels);
  const frameBytes = 2 * channels;
  let skip = format === "wav" ? 44 : 0, carry = new Uint8Array(0), frames = 0;
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
}

async function whole(resp, stats, t0) {
  const data = await resp.arrayBuffer();
  stats.ttfa = performance.now() - t0;
  stats.bytes = data.byteLength; stats.reads = 1;
  const blob = new Blob([data], { type: resp.headers.get("Content-Type") || "audio/mpeg" });
  $("player").src = URL.createObjectURL(blob);
  $("player").hidden = false;
  try {
    const ctx = new AudioContext();
    const buffer = await ctx.decodeAudioData(data.slice(0));
    stats.seconds = buffer.duration;
    const src = ctx.createBufferSource();
    src.buffer = buffer; src.connect(ctx.destination); src.start();
  } catch (e) {
    stats.seconds = Number(resp.headers.get("X-Audio-Seconds") || 0);
  }
  show(stats);
}

async function speak() {
  if (current) current.abort();
  const controller = new AbortController();
  current = controller;
  const format = $("format").value;
  const stats = { ttfa: null, seconds: 0, bytes: 0, reads: 0 };
  show(stats);
  setStatus("running", "Speaking…");
  const t0 = performance.now();
  try {
    const resp = await fetch("/v1/audio/speech", {
      method: "POST", signal: controller.signal,
      headers: { "Content-Type": "application/json", ...authHeaders() },
      body: JSON.stringify(request(format)),
    });
    if (!resp.ok) {
      const err = await resp.json().catch(() => ({ error: { message: resp.statusText } }));
      setStatus("error", `Error ${resp.status}: ${err.error.message}`);
      return;
    }
    if (format === "pcm" || format === "wav") await streamed(resp, format, stats, t0);
    else await whole(resp, stats, t0);
    show(stats);
    setStatus("done", `Done: ${stats.seconds.toFixed(3)} s of audio.`);
  } catch (e) {
    setStatus(e.name === "AbortError" ? "stopped" : "error", e.name === "AbortError" ? "Stopped." : String(e));
  } finally {
    if (current === controller) current = null;
  }
}

$("speak").addEventListener("click", speak);
$("stop").addEventListener("click", () => { if (current) current.abort(); });

(async () => {
  await loadVoices();
  if (params.has("text")) $("text").value = params.get("text");
  if (params.has("format")) $("format").value = params.get("format");
  if (params.has("seed")) $("seed").value = params.get("seed");
  if (params.has("max_frames")) $("max-frames").value = params.get("max_frames");
  if (params.has("voice")) $("voice").value = params.get("voice");
  if (params.get("autorun") === "1") speak();
})();
