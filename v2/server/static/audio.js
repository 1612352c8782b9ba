// The audio side of the playground: scheduling streamed samples on Web Audio (`Player`), and, once a request
// ends, the whole audio: a player, a download link with the right file name, and a drawn waveform.
// Must not know: the request, the voice store.
"use strict";

import { $ } from "./util.js";

export class Player {
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

// Offer the whole audio: `file` for the download (as asked for), `playable` for the player (a wav where the
// format is raw pcm), `channels` for the waveform.
export function showWhole({ file, filename, playable, channels }) {
  for (const u of urls) URL.revokeObjectURL(u);
  const fileUrl = URL.createObjectURL(file);
  const playUrl = playable === file ? fileUrl : URL.createObjectURL(playable);
  urls = [...new Set([fileUrl, playUrl])];
  $("player").src = playUrl;
  const link = $("download");
  link.href = fileUrl;
  link.download = filename;
  link.textContent = `Download ${filename} (${(file.size / 1024).toFixed(1)} kB)`;
  drawWaveform($("waveform"), channels);
  $("result").hidden = false;
}
