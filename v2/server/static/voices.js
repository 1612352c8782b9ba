// The voice side of the playground: the voice menu and the stored-voice list (GET /v1/audio/voices), a
// reference recording to clone from (sent as `ref_audio`, a data URL, with the optional `ref_text`), saving
// it as a stored voice (POST multipart `audio_sample`, `name`, `ref_text`, `replace`) and deleting one
// (DELETE /v1/audio/voices/NAME). Must not know: how speech is requested or played.
"use strict";

import { $, authHeaders, errorText, setStatus } from "./util.js";

const VOICES = "/v1/audio/voices";

export async function loadVoices() {
  let listing;
  try {
    const resp = await fetch(VOICES, { headers: authHeaders() });
    if (!resp.ok) return;
    listing = await resp.json();
  } catch (e) { return; }  // the menu stays at "default"
  const select = $("voice"), keep = select.value;
  select.replaceChildren(new Option("default", ""));
  for (const v of listing.voices) {
    select.appendChild(new Option(v.kind === "builtin" ? v.name + " (default voice)" : v.name, v.id));
  }
  if ([...select.options].some((o) => o.value === keep)) select.value = keep;
  const stored = listing.voices.filter((v) => v.kind === "stored");
  const list = $("voices-list");
  list.replaceChildren(...stored.map((v) => {
    const li = document.createElement("li");
    li.dataset.name = v.id;
    const name = document.createElement("span");
    name.textContent = v.name + (v.ref_text ? ` — “${v.ref_text}”` : "");
    const del = document.createElement("button");
    del.textContent = "Delete";
    del.className = "delete";
    del.addEventListener("click", () => deleteVoice(v.id));
    li.append(name, del);
    return li;
  }));
  $("no-voices").hidden = stored.length > 0;
  $("reference").disabled = !listing.cloning;
  $("cloning-off").hidden = listing.cloning;
}

function dataUrl(file) {
  return new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onload = () => resolve(reader.result);
    reader.onerror = () => reject(reader.error);
    reader.readAsDataURL(file);
  });
}

// The request's cloning fields when "clone from this recording" is on and a file is chosen; else null.
export async function referenceFields() {
  const file = $("ref-file").files[0];
  if (!$("use-ref").checked || !file) return null;
  const fields = { ref_audio: await dataUrl(file) };
  const text = $("ref-text").value.trim();
  if (text) fields.ref_text = text;
  return fields;
}

async function saveVoice() {
  const file = $("ref-file").files[0], name = $("voice-name").value.trim();
  if (!file) return setStatus("voice-status", "error", "Choose a recording first.");
  if (!name) return setStatus("voice-status", "error", "Give the voice a name.");
  const form = new FormData();
  form.append("audio_sample", file, file.name);
  form.append("name", name);
  const text = $("ref-text").value.trim();
  if (text) form.append("ref_text", text);
  if ($("replace").checked) form.append("replace", "true");
  setStatus("voice-status", "saving", `Saving ${name}…`);
  try {
    const resp = await fetch(VOICES, { method: "POST", headers: authHeaders(), body: form });
    if (!resp.ok) return setStatus("voice-status", "error", await errorText(resp));
    await loadVoices();
    $("voice").value = name;
    $("use-ref").checked = false;  // the next request speaks with the stored voice
    setStatus("voice-status", "saved", `Saved ${name}: it is selected as the voice.`);
  } catch (e) { setStatus("voice-status", "error", String(e)); }
}

async function deleteVoice(name) {
  setStatus("voice-status", "deleting", `Deleting ${name}…`);
  try {
    const resp = await fetch(`${VOICES}/${encodeURIComponent(name)}`, { method: "DELETE", headers: authHeaders() });
    if (!resp.ok) return setStatus("voice-status", "error", await errorText(resp));
    await loadVoices();
    setStatus("voice-status", "deleted", `Deleted ${name}.`);
  } catch (e) { setStatus("voice-status", "error", String(e)); }
}

export function wireVoices() {
  $("ref-file").addEventListener("change", () => {
    const file = $("ref-file").files[0];
    $("use-ref").checked = Boolean(file);
    if (file && !$("voice-name").value) $("voice-name").value = file.name.replace(/\.[^.]*$/, "");
  });
  $("save-voice").addEventListener("click", saveVoice);
}
