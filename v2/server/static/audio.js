// The audio side of the playground: playing a response while its bytes arrive (`PcmPlayer`: s16 samples of
// pcm and wav scheduled on Web Audio; `StreamPlayer`: mp3 and aac appended to a MediaSource where the browser
// takes them), playing a whole file once complete (`WholePlayer`: opus, flac, and the others where
// MediaSource does not take them), and, once a request ends, the whole audio: a player, a download link with
// the right file name, and a drawn waveform (cleared when the next run begins: `clearWhole`). Everything plays at the page's gain (`setGain`; a card whose
// weights are seeded noise is played 20 dB down): the gain is in the playback graph, the bytes are never
// changed. Every player has `stop()`, `handed()` (seconds given to the browser) and `heard()` (seconds played).
// Must not know: the request, the voice store.
"use strict";

import { $ } from "./util.js";

const MSE_TYPES = { mp3: "audio/mpeg", aac: "audio/aac" };
let gain = 1;

// The linear gain every player applies from now on (1: as it is; 0.1: -20 dB).
export function setGain(value) { gain = value; }

// How a format is played while it arrives: "pcm" (samples on Web Audio), "mse" (bytes to a MediaSource), or
// null (the browser cannot play it in pieces: it plays when complete).
export function howStreamed(format) {
  if (format === "pcm" || format === "wav") return "pcm";
  const type = MSE_TYPES[format];
  return type && window.MediaSource && MediaSource.isTypeSupported(type) ? "mse" : null;
}

function contextAt(rate) {
  try { return rate ? new AudioContext({ sampleRate: rate }) : new AudioContext(); } catch (e) { return null; }
}

function gainNode(ctx) {
  const node = ctx.createGain();
  node.gain.value = gain;
  node.connect(ctx.destination);
  return node;
}

export class PcmPlayer {
  // Schedules s16 interleaved samples back to back on one AudioContext, through one gain node.
  constructor(rate, channels) {
    this.rate = rate; this.channels = channels; this.at = 0; this.scheduled = 0; this.first = null;
    this.ctx = contextAt(rate);
    this.out = this.ctx ? gainNode(this.ctx) : null;
    this.gain = this.out ? this.out.gain.value : gain;
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
    src.connect(this.out);
    this.at = Math.max(this.at, this.ctx.currentTime + 0.05);
    if (this.first === null) this.first = this.at;
    src.start(this.at);
    this.at += buffer.duration;
    this.scheduled += buffer.duration;
  }
  handed() { return this.scheduled; }
  heard() {
    if (!this.ctx || this.first === null) return 0;
    return Math.min(this.scheduled, Math.max(0, this.ctx.currentTime - this.first));
  }
  // Close the context once what is scheduled has played.
  finish() {
    const left = this.ctx ? Math.max(0, this.at - this.ctx.currentTime) : 0;
    setTimeout(() => this.stop(), left * 1000 + 500);
  }
  stop() {
    if (this.ctx && this.ctx.state !== "closed") this.ctx.close();
  }
}

export class StreamPlayer {
  // Appends a compressed stream's bytes to a MediaSource as they arrive; plays once the first are buffered.
  constructor(format) {
    this.queue = []; this.ended = false; this.started = false; this.buffer = null;
    this.audio = new Audio();
    this.audio.volume = gain;
    this.gain = this.audio.volume;
    this.source = new MediaSource();
    this.url = URL.createObjectURL(this.source);
    this.done = new Promise((resolve) => {  // all bytes in, or the source closed or failed: nothing more comes
      for (const event of ["sourceended", "sourceclose"]) this.source.addEventListener(event, resolve, { once: true });
      this.audio.addEventListener("error", resolve, { once: true });
    });
    this.source.addEventListener("sourceopen", () => {
      this.buffer = this.source.addSourceBuffer(MSE_TYPES[format]);
      this.buffer.mode = "sequence";
      this.buffer.addEventListener("updateend", () => this.pump());
      this.pump();
    }, { once: true });
    this.audio.addEventListener("ended", () => this.stop(), { once: true });
    this.audio.src = this.url;
  }
  push(bytes) { this.queue.push(bytes); this.pump(); }
  // No more bytes: resolves once the MediaSource holds them all.
  end() { this.ended = true; this.pump(); return this.done; }
  pump() {
    if (!this.buffer || this.buffer.updating || this.source.readyState !== "open") return;
    if (!this.started && this.buffer.buffered.length) {
      this.started = true;
      this.audio.play().catch(() => {});
    }
    if (this.queue.length) this.buffer.appendBuffer(this.queue.shift());
    else if (this.ended) this.source.endOfStream();
  }
  handed() {
    const b = this.buffer ? this.buffer.buffered : null;
    return b && b.length ? b.end(b.length - 1) : 0;
  }
  heard() { return this.audio.currentTime; }
  stop() {
    this.audio.pause();
    this.audio.removeAttribute("src");
    URL.revokeObjectURL(this.url);
  }
}

export class WholePlayer {
  // A complete file: decoded (`decode`) and played on Web Audio through a gain node.
  constructor(buffer) {
    this.buffer = buffer;
    this.ctx = contextAt(buffer.sampleRate);
    this.out = this.ctx ? gainNode(this.ctx) : null;
    this.gain = this.out ? this.out.gain.value : gain;
    this.t0 = 0;
    if (!this.ctx) return;
    const src = this.ctx.createBufferSource();
    src.buffer = buffer; src.connect(this.out);
    src.onended = () => this.stop();
    this.t0 = this.ctx.currentTime;
    src.start();
  }
  handed() { return this.buffer.duration; }
  heard() { return this.ctx ? Math.min(this.buffer.duration, this.ctx.currentTime - this.t0) : 0; }
  stop() {
    if (this.ctx && this.ctx.state !== "closed") this.ctx.close();
  }
}

// A whole file's audio at `rate` (the response's own rate: no resampling), or null if the browser cannot decode it.
export async function decode(data, rate) {
  try {
    const ctx = new OfflineAudioContext(1, 1, rate || 48000);
    return await ctx.decodeAudioData(data.slice(0));
  } catch (e) {
    return null;
  }
}

// A wav file (44-byte header, sizes filled in) around s16le interleaved samples.
export function wavBlob(pcm, rate, channels) {
  const head = new DataView(new ArrayBuffer(44));
  const text = (at, s) => { for (let i = 0; i < s.length; i++) head.setUint8(at + i, s.charCodeAt(i)); };
  text(0, "RIFF"); head.setUint32(4, 36 + pcm.length, true); text(8, "WAVE");
  text(12, "fmt "); head.setUint32(16, 16, true); head.setUint16(20, 1, true); head.setUint16(22, channels, true);
  head.setUint32(24, rate, true); head.setUint32(28, rate * channels * 2, true);
  head.setUint16(32, channels * 2, true); head.setUint16(34, 16, true);
  text(36, "data"); head.setUint32(40, pcm.length, true);
  return new Blob([head.buffer, pcm], { type: "audio/wav" });
}

// s16le interleaved bytes -> one Float32Array per channel, in [-1, 1).
export function channelsOf(pcm, channels) {
  const view = new DataView(pcm.buffer, pcm.byteOffset, pcm.length - (pcm.length % (2 * channels)));
  const frames = view.byteLength / (2 * channels);
  const out = Array.from({ length: channels }, () => new Float32Array(frames));
  for (let i = 0; i < frames; i++) {
    for (let c = 0; c < channels; c++) out[c][i] = view.getInt16(2 * (i * channels + c), true) / 32768;
  }
  return out;
}

// The channel mean's lowest and highest value in each of the canvas's columns, drawn as one bar per column.
export function drawWaveform(canvas, channels) {
  const g = canvas.getContext("2d"), w = canvas.width, h = canvas.height;
  g.clearRect(0, 0, w, h);
  const frames = channels.length ? channels[0].length : 0;
  canvas.dataset.drawn = "0";
  if (frames === 0) return;
  g.fillStyle = "#1d5fd1";
  const per = frames / w;
  for (let x = 0; x < w; x++) {
    const start = Math.floor(x * per), end = Math.max(start + 1, Math.floor((x + 1) * per));
    let lo = Infinity, hi = -Infinity;
    for (let i = start; i < end && i < frames; i++) {
      let v = 0;
      for (const ch of channels) v += ch[i];
      v /= channels.length;
      if (v < lo) lo = v;
      if (v > hi) hi = v;
    }
    if (lo === Infinity) continue;
    const top = Math.round((1 - hi) * h / 2), bottom = Math.round((1 - lo) * h / 2);
    g.fillRect(x, top, 1, Math.max(1, bottom - top));
  }
  canvas.dataset.drawn = "1";
}

let urls = [];

// Nothing offered: a run has begun (its own audio is offered when it is done; a stopped or failed one has none).
export function clearWhole() {
  $("result").hidden = true;
  $("player").pause();
  $("player").removeAttribute("src");
  $("download").removeAttribute("href");
  for (const u of urls) URL.revokeObjectURL(u);
  urls = [];
}

// Offer the whole audio: `file` for the download (as asked for), `playable` for the player (a wav where the
// format is raw pcm), `channels` for the waveform. The player starts at the page's gain.
export function showWhole({ file, filename, playable, channels }) {
  for (const u of urls) URL.revokeObjectURL(u);
  const fileUrl = URL.createObjectURL(file);
  const playUrl = playable === file ? fileUrl : URL.createObjectURL(playable);
  urls = [...new Set([fileUrl, playUrl])];
  $("player").src = playUrl;
  $("player").volume = gain;
  const link = $("download");
  link.href = fileUrl;
  link.download = filename;
  link.textContent = `Download ${filename} (${(file.size / 1024).toFixed(1)} kB)`;
  drawWaveform($("waveform"), channels);
  $("result").hidden = false;
}
