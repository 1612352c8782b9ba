// What the playground's modules share: element lookup, the API key header, status lines, error text.
"use strict";

export const $ = (id) => document.getElementById(id);

export function authHeaders() {
  const key = $("api-key").value.trim();
  return key ? { Authorization: "Bearer " + key } : {};
}

export function setStatus(id, state, text) {
  $(id).dataset.state = state;
  $(id).textContent = text;
}

// "Error 400 (top_k): ..." from a failed response in OpenAI's error shape (or its status line).
export async function errorText(resp) {
  const body = await resp.json().catch(() => null);
  const err = body && body.error ? body.error : { message: resp.statusText };
  return `Error ${resp.status}${err.param ? " (" + err.param + ")" : ""}: ${err.message}`;
}
