// The playground page: synthesise through POST /v1/audio/speech and play the audio as its bytes arrive: pcm
// and wav decoded and scheduled on Web Audio chunk by chunk, mp3 and aac through a MediaSource where the
// browser takes them; opus and flac (and mp3, aac elsewhere) are asked for whole and play when complete; each
// format's menu entry says which. The default format is wav, so the default download is a wav file with its
// sizes filled in. A card whose weights are seeded noise (`seeded_noise` in GET /v1/models) is played 20 dB
// down, with a note on the page; the bytes offered for download are the server's, unchanged. When a request
// is done, the whole audio is offered in a player, as a download and as a waveform (audio.js); a run that
// begins takes the last one's off the page, so only a run that is done offers audio, its own.
// The sampling knobs left empty keep the card's settings; a reference recording clones (voices.js).
// "live" speaks over the speech stream instead (live.js), where Stop cancels the utterance (input.cancel); its
// whole audio is a wav built from the pcm received.
// A chat card (`chat` in GET /v1/models) gets chat mode instead of the speech form (chat.js).
// ?text=...&format=...&seed=...&max_frames=...&temperature=...&top_p=...&top_k=...&repetition_penalty=...
// &voice=...&autorun=1 fills the form and speaks on load.
"use strict";

import { $, authHeaders, errorText, setStatus } from "./util.js";
import { PcmPlayer, StreamPlayer, WholePlayer, channelsOf, clearWhole, decode, howStreamed, setGain, showWhole,
         wavBlob } from "./audio.js";
import { loadVoices, referenceFields, wireVoices } from "./voices.js";
import { speakLive, stopLive } from "./live.js";
import { startChat } from "./chat.js";

// [input id, request field = query parameter]: numbers, sent only when filled in
const KNOBS = [["seed", "seed"], ["max-frames", "max_frames"], ["temperature", "temperature"], ["top-p", "top_p"],
               ["top-k", "top_k"], ["repetition-penalty", "repetition_penalty"]];
const SEEDED_GAIN = 0.1;  // -20 dB: seeded weights make full-scale noise
const params = new URLSearchParams(location.search);
let current = null;   // the request in flight: { controller, player }
let playing = null;   // the player of the last request, which may still be sounding after its request ended
let modelKnown = false;

// Whether the served model's weights are seeded noise: its gain and the page's note. Unknown (no answer, a
// key not typed in yet) leaves the gain as it is and is asked again at the next Speak.
async function loadModel() {
  try {
    const resp = await fetch("/v1/models", { headers: authHeaders() });
    if (!resp.ok) return;
    const model = (await resp.json()).data[0];
    if (model && model.chat) await startChat(model.id);  // a chat card: chat mode (chat.js)
    const seeded = Boolean(model && model.seeded_noise);
    setGain(seeded ? SEEDED_GAIN : 1);
    $("seeded-note").hidden = !seeded;
    $("page").dataset.seeded = seeded ? "1" : "0";
    modelKnown = true;
  } catch (e) { /* the page works without it */ }
}

// Each format's menu entry says whether it plays while it arrives or once complete.
function labelFormats() {
  for (const option of $("format").options) {
    const how = howStreamed(option.value);
    const extra = option.value === "pcm" ? ", raw s16le download" : "";
    option.textContent = `${option.value} (${how ? "streamed" : "plays when complete"}${extra})`;
    option.dataset.streamed = how ? "1" : "0";
  }
}

// The knobs, the voice or the reference recording: the fields a speech body and a stream's config share.
async function speechFields() {
  const body = {};
  for (const [id, field] of KNOBS) {
    const value = $(id).value.trim();
    if (value !== "") body[field] = Number(value);
  }
  const reference = await referenceFields();
  if (reference) Object.assign(body, reference);  // cloning from the recording: no stored voice
  else if ($("voice").value) body.voice = $("voice").value;
  return body;
}

async function request(format) {
  const body = { input: $("text").value, response_format: format, ...(await speechFields()) };
  if (howStreamed(format)) body.stream_format = "audio";
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

// What a player did, for the page's readers (and its test): seconds handed to it, seconds already heard when
// the last byte arrived (more than 0: it played while the audio was streaming), the gain it plays at.
function record(player, heardAtEnd) {
  const el = $("audio-seconds");
  el.dataset.played = player.handed().toFixed(6);
  el.dataset.heardAtEnd = heardAtEnd.toFixed(6);
  el.dataset.gain = String(player.gain);
}

// The body's pieces as they arrive, counted in `stats`.
async function readBody(resp, stats, onPiece) {
  const reader = resp.body.getReader();
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    stats.reads += 1;
    stats.bytes += value.length;
    onPiece(value);
  }
}

function use(session, player) {
  session.player = player;
  playing = player;
  return player;
}

// pcm and wav: s16 samples scheduled on Web Audio as they arrive (wav's 44-byte open-length header skipped).
async function streamedPcm(session, resp, format, stats, t0) {
  const rate = Number(resp.headers.get("X-Sample-Rate")), channels = Number(resp.headers.get("X-Channels"));
  const player = use(session, new PcmPlayer(rate, channels));
  const frameBytes = 2 * channels;
  let skip = format === "wav" ? 44 : 0, carry = new Uint8Array(0), frames = 0, kept = 0;
  const parts = [];  // every sample's bytes, for the whole audio at the end
  await readBody(resp, stats, (value) => {
    let bytes = new Uint8Array(carry.length + value.length);
    bytes.set(carry); bytes.set(value, carry.length);
    const drop = Math.min(skip, bytes.length);
    bytes = bytes.subarray(drop); skip -= drop;
    const usable = bytes.length - (bytes.length % frameBytes);
    carry = bytes.slice(usable);
    if (usable === 0) return;
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
  });
  record(player, player.heard());
  player.finish();
  const pcm = concat(parts, kept);
  const wav = wavBlob(pcm, rate, channels);  // for wav: the streamed header's open sizes filled in
  const file = format === "pcm" ? new Blob([pcm], { type: "audio/pcm" }) : wav;
  showWhole({ file, filename: "speech." + format, playable: wav, channels: channelsOf(pcm, channels) });
}

// mp3 and aac where MediaSource takes them: the bytes appended as they arrive; the download is those bytes.
async function streamedFile(session, resp, format, stats, t0) {
  const rate = Number(resp.headers.get("X-Sample-Rate"));
  const player = use(session, new StreamPlayer(format));
  const parts = [];
  let kept = 0;
  await readBody(resp, stats, (value) => {
    if (stats.ttfa === null) stats.ttfa = performance.now() - t0;
    parts.push(value);
    kept += value.length;
    player.push(value);
    stats.seconds = player.handed();
    show(stats);
  });
  const heard = player.heard();
  await player.end();
  record(player, heard);
  const data = concat(parts, kept);
  const decoded = await decode(data.buffer, rate);
  stats.seconds = decoded ? decoded.duration : player.handed();
  const file = new Blob([data], { type: resp.headers.get("Content-Type") || "audio/mpeg" });
  showWhole({ file, filename: "speech." + format, playable: file, channels: decodedChannels(decoded) });
}

function decodedChannels(buffer) {
  return buffer ? Array.from({ length: buffer.numberOfChannels }, (_, c) => buffer.getChannelData(c)) : [];
}

// The formats a browser cannot play in pieces: the whole file, decoded and played once it is here.
async function whole(session, resp, format, stats, t0) {
  const data = await resp.arrayBuffer();
  stats.ttfa = performance.now() - t0;
  stats.bytes = data.byteLength; stats.reads = 1;
  const file = new Blob([data], { type: resp.headers.get("Content-Type") || "audio/mpeg" });
  const decoded = await decode(data, Number(resp.headers.get("X-Sample-Rate")));
  if (decoded) {
    stats.seconds = decoded.duration;
    record(use(session, new WholePlayer(decoded)), 0);
  } else {
    stats.seconds = Number(resp.headers.get("X-Audio-Seconds") || 0);
  }
  showWhole({ file, filename: "speech." + format, playable: file, channels: decodedChannels(decoded) });
  show(stats);
}

function stopAll() {
  stopLive();
  if (current) current.controller.abort();
  if (playing) playing.stop();
  playing = null;
}

async function speak() {
  stopAll();
  const session = { controller: new AbortController(), player: null };
  current = session;
  const format = $("format").value;
  const stats = { ttfa: null, seconds: 0, bytes: 0, reads: 0 };
  show(stats);
  clearWhole();
  setStatus("status", "running", "Speaking…");
  const t0 = performance.now();
  try {
    if (!modelKnown) await loadModel();
    if ($("live").checked) {
      await live(stats);
      return;
    }
    const resp = await fetch("/v1/audio/speech", {
      method: "POST", signal: session.controller.signal,
      headers: { "Content-Type": "application/json", ...authHeaders() },
      body: JSON.stringify(await request(format)),
    });
    if (!resp.ok) {
      setStatus("status", "error", await errorText(resp));
      return;
    }
    const how = howStreamed(format);
    if (how === "pcm") await streamedPcm(session, resp, format, stats, t0);
    else if (how === "mse") await streamedFile(session, resp, format, stats, t0);
    else await whole(session, resp, format, stats, t0);
    show(stats);
    setStatus("status", "done", `Done: ${stats.seconds.toFixed(3)} s of audio.`);
  } catch (e) {
    if (session.player) session.player.stop();
    const stopped = e.name === "AbortError";
    setStatus("status", stopped ? "stopped" : "error", stopped ? "Stopped." : String(e));
  } finally {
    if (current === session) current = null;
  }
}

// Over the speech stream: the sound plays as it arrives; Stop cancels the utterance, the socket stays.
async function live(stats) {
  const outcome = await speakLive($("text").value, await speechFields(), stats, show);
  show(stats);
  if (outcome.cancelled) setStatus("status", "stopped", "Stopped.");
  else if (outcome.error) setStatus("status", "error", outcome.error);
  else if (outcome.closed) setStatus("status", "error", "The speech stream closed.");
  else {
    const { pcm, rate, channels } = outcome;
    const wav = wavBlob(pcm, rate, channels);
    showWhole({ file: wav, filename: "speech.wav", playable: wav, channels: channelsOf(pcm, channels) });
    setStatus("status", "done", `Done: ${stats.seconds.toFixed(3)} s of audio.`);
  }
}

$("speak").addEventListener("click", speak);
$("stop").addEventListener("click", stopAll);
wireVoices();
labelFormats();

(async () => {
  await Promise.all([loadVoices(), loadModel()]);
  if (params.has("text")) $("text").value = params.get("text");
  if (params.has("format")) $("format").value = params.get("format");
  for (const [id, field] of KNOBS) if (params.has(field)) $(id).value = params.get(field);
  if (params.has("voice")) $("voice").value = params.get("voice");
  $("page").dataset.ready = "1";
  if (params.get("autorun") === "1") speak();
})();
