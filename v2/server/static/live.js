// The playground's live mode: the text spoken over the speech stream (WS /v1/audio/speech/stream) instead of
// POST /v1/audio/speech: `session.config` (the form's knobs, raw pcm streamed as it is made), the text as
// one `input.text`, `input.done`; each binary frame is played on Web Audio as it arrives. Stop sends
// `input.cancel` (barge-in): the server acknowledges with `input.cancelled` and sends nothing more of the
// utterance; the connection and its config stay for the next Speak. What the page saw is logged in
// `window.liveLog` (event types, ":cancelled" added to a cancelled one's, and "binary"), in order. A browser
// can set no header on a WebSocket, so the key field's API key goes as a subprotocol entry
// (`v2.bearer.<base64url of its UTF-8>`, beside `v2.speech`, the name the server echoes); a new key connects
// anew, a wrong one is refused at the handshake and the page says so. The pcm received is kept and handed
// back, so the page can offer the whole utterance as every run's.
// Must not know: the voice store, how a whole response is played or offered.
"use strict";

import { $, setStatus } from "./util.js";
import { PcmPlayer } from "./audio.js";

const STREAM = "/v1/audio/speech/stream";
const PROTOCOL = "v2.speech", KEY_PROTOCOL = "v2.bearer.";
let socket = null;    // { ws, key, sent: the config's JSON (a new one is sent when it changes), waiters }
let utterance = null; // the one being spoken: { player, resolve, ended, errors, stopped, push }
window.liveLog = [];

function url() {
  return (location.protocol === "https:" ? "wss://" : "ws://") + location.host + STREAM;
}

// The subprotocols the handshake offers: with a key, the entry that carries it (unpadded base64url of its UTF-8).
function protocols(key) {
  if (!key) return [];
  let bytes = "";
  for (const b of new TextEncoder().encode(key)) bytes += String.fromCharCode(b);
  const encoded = btoa(bytes).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
  return [PROTOCOL, KEY_PROTOCOL + encoded];
}

// The open socket (connected once; again after it closes or when the key changes).
function connect() {
  const key = $("api-key").value.trim();
  if (socket && socket.ws.readyState === WebSocket.OPEN && socket.key === key) return Promise.resolve(socket);
  if (socket) socket.ws.close();
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url(), protocols(key));
    ws.binaryType = "arraybuffer";
    const s = { ws, key, sent: null, waiters: [] };
    ws.onopen = () => { socket = s; resolve(s); };
    ws.onerror = () => reject(new Error("the speech stream refused the connection" +
                                        (key ? " (is the API key right?)" : " (does the server need an API key?)")));
    ws.onclose = () => { if (socket === s) socket = null; if (utterance) utterance.resolve({ type: "closed" }); };
    ws.onmessage = (m) => onMessage(s, m.data);
  });
}

const ENDING = ["overloaded", "shutting_down", "internal_error"];  // errors after which no session.done comes

function onMessage(s, data) {
  if (typeof data !== "string") {
    window.liveLog.push("binary");
    if (utterance && !utterance.stopped) utterance.push(new Int16Array(data));
    return;
  }
  const event = JSON.parse(data);
  window.liveLog.push(event.cancelled ? event.type + ":cancelled" : event.type);
  const waiter = s.waiters.find((w) => w.kinds.includes(event.type));
  if (waiter) { s.waiters.splice(s.waiters.indexOf(waiter), 1); waiter.resolve(event); return; }
  if (!utterance) return;
  if (event.type === "error") utterance.errors.push(event);
  if (event.type === "session.done" || (event.type === "error" && ENDING.includes(event.code))) utterance.resolve(event);
}

function next(s, ...kinds) {
  return new Promise((resolve) => s.waiters.push({ kinds, resolve }));
}

// Speak `text` with `config` (the speech fields, less `input`); resolves with how it ended and the seconds
// of audio received.
export async function speakLive(text, config, stats, show) {
  while (utterance) await utterance.ended;  // one stopped a moment ago: its session.done first
  const s = await connect();
  const wanted = JSON.stringify({ type: "session.config", ...config, response_format: "pcm", stream_audio: true });
  if (s.sent !== wanted) {
    s.ws.send(wanted);
    const ready = await next(s, "session.ready", "error");
    if (ready.type === "error") return { error: `Error (${ready.param}): ${ready.message}` };
    s.sent = wanted;
    s.rate = ready.sample_rate;
    s.channels = ready.channels || 1;
  }
  const player = new PcmPlayer(s.rate, s.channels);
  const t0 = performance.now();
  const errors = [], parts = [];  // parts: the s16 samples received, for the whole utterance
  const ended = new Promise((resolve) => {
    utterance = { player, resolve, errors, stopped: false, push: (samples) => {
      if (stats.ttfa === null) stats.ttfa = performance.now() - t0;
      stats.reads += 1; stats.bytes += samples.length * 2; stats.seconds += samples.length / s.channels / s.rate;
      parts.push(samples);
      player.push(samples);
      show(stats);
    } };
  });
  utterance.ended = ended;
  s.ws.send(JSON.stringify({ type: "input.text", text }));
  s.ws.send(JSON.stringify({ type: "input.done" }));
  const event = await ended;  // session.done (cancelled or not), an error that ends it, or the socket closed
  utterance = null;
  player.finish();
  const error = errors.length ? errors[0] : null;
  return { cancelled: Boolean(event.cancelled), closed: event.type === "closed",
           error: error ? `Error${error.param ? " (" + error.param + ")" : ""}: ${error.message}` : null,
           pcm: s16le(parts), rate: s.rate, channels: s.channels };
}

// The samples received, as s16le bytes.
function s16le(parts) {
  const out = new Uint8Array(2 * parts.reduce((n, p) => n + p.length, 0));
  const view = new DataView(out.buffer);
  let at = 0;
  for (const p of parts) for (const v of p) { view.setInt16(at, v, true); at += 2; }
  return out;
}

// Stop: the utterance being spoken is cancelled (input.cancel) and its sound stopped at once.
export function stopLive() {
  if (!utterance || !socket) return false;
  utterance.stopped = true;
  utterance.player.stop();
  setStatus("status", "running", "Stopping…");
  socket.ws.send(JSON.stringify({ type: "input.cancel" }));
  return true;
}
