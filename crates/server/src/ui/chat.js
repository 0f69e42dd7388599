// The chat page: streams answers from /v1/chat/completions (SSE), renders them as Markdown,
// shows the reasoning (delta.reasoning) collapsed, and the answer's tokens/s. The settings and
// the API key are kept in localStorage. URLs are relative, so the page also works behind a
// proxy that serves the API under a path prefix.
"use strict";

(function () {
  const $ = (id) => document.getElementById(id);
  const SETTINGS = ["api-key", "system-prompt", "temperature", "top-p", "top-k", "max-tokens"];
  const history = []; // the conversation sent with each request: {role, content}
  let model = null;
  let controller = null; // aborts the answer being streamed

  function loadSettings() {
    for (const id of SETTINGS) {
      const saved = localStorage.getItem("vllm-rs." + id);
      if (saved !== null) $(id).value = saved;
      $(id).addEventListener("input", () => localStorage.setItem("vllm-rs." + id, $(id).value));
    }
  }

  function headers() {
    const h = { "Content-Type": "application/json" };
    const key = $("api-key").value.trim();
    if (key) h.Authorization = "Bearer " + key;
    return h;
  }

  function showError(message) {
    $("error").textContent = message;
    $("error").hidden = !message;
  }

  // The message of an error answer (OpenAI's {"error": {"message"}}, FastAPI's {"detail"}).
  async function errorMessage(resp) {
    const text = await resp.text();
    try {
      const body = JSON.parse(text);
      return (body.error && body.error.message) || body.detail || text;
    } catch {
      return text || resp.status + " " + resp.statusText;
    }
  }

  async function loadModel() {
    try {
      const resp = await fetch("v1/models", { headers: headers() });
      if (resp.status === 401) {
        showError("This server needs an API key: enter it under API key.");
        return;
      }
      if (!resp.ok) throw new Error(await errorMessage(resp));
      model = (await resp.json()).data[0].id;
      $("model").textContent = model;
      showError("");
    } catch (e) {
      showError("Could not list the models: " + e.message);
    }
  }

  // A settings field as a number, or undefined when empty: the server's default applies (the
  // model's generation_config.json, as vLLM's --generation-config auto).
  function numberField(id) {
    const v = $(id).value.trim();
    if (v === "") return undefined;
    const n = Number(v);
    if (!Number.isFinite(n)) throw new Error($(id).parentElement.firstChild.textContent.trim() + " is not a number");
    return n;
  }

  function requestBody() {
    const system = $("system-prompt").value.trim();
    const messages = system ? [{ role: "system", content: system }, ...history] : [...history];
    return {
      model: model || undefined,
      messages,
      stream: true,
      stream_options: { include_usage: true },
      temperature: numberField("temperature"),
      top_p: numberField("top-p"),
      top_k: numberField("top-k"),
      max_tokens: numberField("max-tokens"),
    };
  }

  function bubble(role) {
    const div = document.createElement("div");
    div.className = "msg " + role;
    const label = document.createElement("div");
    label.className = "role";
    label.textContent = role;
    div.appendChild(label);
    $("messages").appendChild(div);
    return div;
  }

  function addUserMessage(text) {
    const div = bubble("user");
    const p = document.createElement("div");
    p.className = "user-text";
    p.textContent = text;
    div.appendChild(p);
    return div;
  }

  // The assistant's bubble, updated as the answer streams in.
  function assistantView() {
    const div = bubble("assistant");
    div.dataset.state = "streaming";
    const details = document.createElement("details");
    details.hidden = true;
    const summary = document.createElement("summary");
    summary.textContent = "Reasoning";
    const reasoning = document.createElement("div");
    reasoning.className = "reasoning";
    details.append(summary, reasoning);
    const content = document.createElement("div");
    content.className = "content";
    const stats = document.createElement("div");
    stats.className = "stats";
    div.append(details, content, stats);
    let pending = false;
    const view = {
      div,
      text: "",
      reasoning: "",
      // Re-renders at most once a frame (each render parses the whole answer).
      update() {
        if (pending) return;
        pending = true;
        requestAnimationFrame(() => {
          pending = false;
          const atBottom = nearBottom();
          details.hidden = view.reasoning === "";
          reasoning.textContent = view.reasoning;
          content.replaceChildren(window.renderMarkdown(view.text));
          if (atBottom) scrollDown();
        });
      },
      finish(state, line) {
        div.dataset.state = state;
        stats.textContent = line;
        view.update();
      },
    };
    return view;
  }

  function nearBottom() {
    const m = $("messages");
    return m.scrollHeight - m.scrollTop - m.clientHeight < 80;
  }

  function scrollDown() {
    $("messages").scrollTop = $("messages").scrollHeight;
  }

  // Calls `onChunk` with each JSON chunk of an SSE body until `[DONE]`.
  async function readEvents(resp, onChunk) {
    const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
    let buf = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) throw new Error("the stream ended without [DONE]");
      buf += value;
      let end;
      while ((end = buf.search(/\r?\n\r?\n/)) >= 0) {
        const event = buf.slice(0, end);
        buf = buf.slice(end).replace(/^\r?\n\r?\n/, "");
        const data = event
          .split(/\r?\n/)
          .filter((l) => l.startsWith("data:"))
          .map((l) => l.slice(5).trimStart())
          .join("\n");
        if (data === "[DONE]") return;
        if (data) onChunk(JSON.parse(data));
      }
    }
  }

  // "42 tokens, 31.5 tokens/s, first token after 0.12 s": the rate is over the tokens after
  // the first, so the prompt's processing does not count in it.
  function statsLine(usage, t0, tFirst, tEnd, finish) {
    const parts = [];
    if (usage) {
      const n = usage.completion_tokens;
      parts.push(n + (n === 1 ? " token" : " tokens"));
      if (n > 1 && tEnd > tFirst) parts.push(((n - 1) / ((tEnd - tFirst) / 1000)).toFixed(1) + " tokens/s");
    }
    if (tFirst) parts.push("first token after " + ((tFirst - t0) / 1000).toFixed(2) + " s");
    if (finish === "length") parts.push("stopped at max tokens");
    return parts.join(" · ");
  }

  async function send(text) {
    showError("");
    let body;
    try {
      body = requestBody();
    } catch (e) {
      showError(e.message);
      return;
    }
    const userDiv = addUserMessage(text);
    history.push({ role: "user", content: text });
    body.messages.push({ role: "user", content: text });
    const view = assistantView();
    scrollDown();
    controller = new AbortController();
    setBusy(true);
    const t0 = performance.now();
    let tFirst = 0;
    let usage = null;
    let finish = null;
    try {
      const resp = await fetch("v1/chat/completions", {
        method: "POST",
        headers: headers(),
        body: JSON.stringify(body),
        signal: controller.signal,
      });
      if (!resp.ok) throw new Error(await errorMessage(resp));
      await readEvents(resp, (chunk) => {
        if (chunk.error) throw new Error(chunk.error.message);
        if (chunk.usage) usage = chunk.usage;
        const choice = chunk.choices && chunk.choices[0];
        if (!choice) return;
        const delta = choice.delta || {};
        const reasoning = delta.reasoning || delta.reasoning_content || "";
        if ((delta.content || reasoning) && !tFirst) tFirst = performance.now();
        view.text += delta.content || "";
        view.reasoning += reasoning;
        if (choice.finish_reason) finish = choice.finish_reason;
        view.update();
      });
      history.push({ role: "assistant", content: view.text });
      view.finish("done", statsLine(usage, t0, tFirst, performance.now(), finish));
    } catch (e) {
      if (e.name === "AbortError") {
        // Stopped: the partial answer stays in the conversation; the server frees the request
        // when the connection closes.
        if (view.div.isConnected) history.push({ role: "assistant", content: view.text });
        view.finish("stopped", "stopped by you" + (tFirst ? " · " + statsLine(null, t0, tFirst, 0, null) : ""));
      } else if (!view.text && !view.reasoning) {
        // Nothing came back: take the question back so it can be fixed and sent again.
        history.pop();
        userDiv.remove();
        view.div.remove();
        $("input").value = text;
        showError(e.message);
      } else {
        history.push({ role: "assistant", content: view.text });
        view.div.classList.add("failed");
        view.finish("failed", "error: " + e.message);
      }
    } finally {
      controller = null;
      setBusy(false);
    }
  }

  function setBusy(busy) {
    $("send").hidden = busy;
    $("stop").hidden = !busy;
  }

  function start() {
    loadSettings();
    window.chat = { history }; // for the browser test and the console
    $("composer").addEventListener("submit", (ev) => {
      ev.preventDefault();
      const text = $("input").value;
      if (controller || !text.trim()) return;
      $("input").value = "";
      send(text);
    });
    $("input").addEventListener("keydown", (ev) => {
      if (ev.key === "Enter" && !ev.shiftKey && !ev.isComposing) {
        ev.preventDefault();
        $("composer").requestSubmit();
      }
    });
    $("stop").addEventListener("click", () => controller && controller.abort());
    $("new-chat").addEventListener("click", () => {
      if (controller) controller.abort();
      history.length = 0;
      $("messages").replaceChildren();
      showError("");
    });
    $("api-key").addEventListener("change", loadModel);
    loadModel();
  }

  start();
})();
