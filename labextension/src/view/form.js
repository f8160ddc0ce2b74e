// The launch form: where and how to run, and one typed input per hyperparameter the cell
// reads. Values are checked here as the user types (the kernel checks them again) and sent
// as text, so "1e-3" or a long integer reaches Python exactly as typed.
import { escapeHtml } from "./ansi.js";

const CHECKS = {
  int: (t) => (/^\s*[+-]?\d+\s*$/.test(t) ? null : "a whole number"),
  float: (t) => (t.trim() !== "" && isFinite(Number(t)) ? null : "a number"),
  str: () => null,
  bool: () => null,
  list: (t) => jsonCheck(t, (v) => Array.isArray(v), "a JSON list, e.g. [1, 2]"),
  dict: (t) => jsonCheck(t, (v) => v !== null && typeof v === "object" && !Array.isArray(v), 'a JSON object, e.g. {"a": 1}'),
  json: (t) => jsonCheck(t, () => true, "a JSON value (null, a number, \"text\", …)"),
};

function jsonCheck(text, ok, what) {
  try {
    return ok(JSON.parse(text)) ? null : what;
  } catch (e) {
    return what;
  }
}

function positiveInt(text) {
  return /^\s*\d+\s*$/.test(text) && Number(text) >= 1 ? null : "a whole number ≥ 1";
}

function option(value, label, selected) {
  return `<option value="${escapeHtml(value)}"${selected ? " selected" : ""}>${escapeHtml(label)}</option>`;
}

export function renderForm(root, model) {
  const form = model.get("form") || {};
  const params = form.params || [];
  root.innerHTML = `
    <form class="jt-form" data-testid="jt-form" novalidate>
      <div class="jt-form-title">Launch a training run</div>
      <div class="jt-form-grid jt-form-run">
        <label>Name<input name="name" data-testid="jt-form-name" value="${escapeHtml(form.name || "")}" placeholder="cell"></label>
        <label>Target<select name="target" data-testid="jt-form-target">${(form.targets || ["local"]).map((t) => option(t, t, t === form.target)).join("")}</select></label>
        <label>Nodes<input name="nodes" data-testid="jt-form-nodes" inputmode="numeric" value="${form.nodes ?? 1}"><span class="jt-field-error"></span></label>
        <label>Processes per node<input name="procs" data-testid="jt-form-procs" inputmode="numeric" value="${form.procs ?? 1}"><span class="jt-field-error"></span></label>
        <label>Launcher<select name="launcher" data-testid="jt-form-launcher">${(form.launchers || []).map((l) => option(l, l, l === form.launcher)).join("")}</select></label>
        <label>Environment<select name="env" data-testid="jt-form-env">${(form.environments || []).map((e) => option(e.value, e.label, e.value === (form.environment || ""))).join("")}</select></label>
      </div>
      <div class="jt-form-subtitle">Hyperparameters <span class="jt-muted">${params.length ? "read by the cell; each starts at its notebook value" : "— the cell reads none"}</span></div>
      <div class="jt-form-grid jt-form-params">
        ${params.map((p) => paramField(p)).join("")}
      </div>
      <div class="jt-form-error" data-testid="jt-form-error" hidden></div>
      <div class="jt-form-actions">
        <button type="submit" class="jt-button jt-primary" data-testid="jt-launch">Launch</button>
        <span class="jt-muted jt-form-status"></span>
      </div>
    </form>`;
  const el = root.querySelector("form");
  const launch = el.querySelector("[data-testid=jt-launch]");
  const status = el.querySelector(".jt-form-status");
  const general = el.querySelector(".jt-form-error");

  const fieldChecks = () => {
    const errors = {};
    for (const p of params) {
      if (p.type === "bool") continue;
      const input = el.querySelector(`[data-param="${CSS.escape(p.name)}"]`);
      const problem = CHECKS[p.type](input.value);
      if (problem) errors[p.name] = `${p.name} must be ${problem}`;
    }
    for (const key of ["nodes", "procs"]) {
      const problem = positiveInt(el.elements[key].value);
      if (problem) errors[key] = `${key} must be ${problem}`;
    }
    return errors;
  };
  const showErrors = (errors) => {
    el.querySelectorAll(".jt-field-error").forEach((n) => { n.textContent = ""; });
    el.querySelectorAll(".jt-invalid").forEach((n) => n.classList.remove("jt-invalid"));
    for (const [key, text] of Object.entries(errors)) {
      if (key === "_") continue;
      const input = el.querySelector(`[data-param="${CSS.escape(key)}"]`) || el.elements[key];
      if (!input) continue;
      input.classList.add("jt-invalid");
      const slot = input.closest("label").querySelector(".jt-field-error");
      if (slot) slot.textContent = text;
    }
    general.hidden = !errors._;
    general.textContent = errors._ || "";
  };
  const refresh = () => {
    const errors = fieldChecks();
    showErrors({ ...(model.get("form_errors") || {}), ...errors });
    launch.disabled = Object.keys(errors).length > 0 || model.get("form_busy");
    status.textContent = model.get("form_busy") ? "launching…" : "";
  };
  el.addEventListener("input", refresh);
  el.addEventListener("submit", (event) => {
    event.preventDefault();
    if (Object.keys(fieldChecks()).length) return refresh();
    const values = {};
    for (const p of params) {
      const input = el.querySelector(`[data-param="${CSS.escape(p.name)}"]`);
      values[p.name] = p.type === "bool" ? input.checked : input.value;
    }
    const options = {};
    for (const key of ["name", "target", "nodes", "procs", "launcher", "env"]) options[key] = el.elements[key].value;
    model.send({ type: "launch", values, options });
    launch.disabled = true;
    status.textContent = "launching…";
  });
  const onErrors = () => refresh();
  model.on("change:form_errors", onErrors);
  model.on("change:form_busy", refresh);
  refresh();
  return () => {
    model.off("change:form_errors", onErrors);
    model.off("change:form_busy", refresh);
  };
}

function paramField(p) {
  const name = escapeHtml(p.name);
  const type = `<span class="jt-type">${escapeHtml(p.type === "json" ? "JSON" : p.type)}</span>`;
  if (p.type === "bool") {
    return `<label class="jt-param jt-param-bool"><span class="jt-param-name">${name}${type}</span>
      <span><input type="checkbox" data-param="${name}" data-testid="jt-param-${name}"${p.value ? " checked" : ""}> ${p.value ? "True" : "False"} in the notebook</span>
      <span class="jt-field-error"></span></label>`;
  }
  const wide = p.type === "list" || p.type === "dict" || p.type === "json" || p.type === "str";
  return `<label class="jt-param${wide ? " jt-wide" : ""}"><span class="jt-param-name">${name}${type}</span>
    <input data-param="${name}" data-testid="jt-param-${name}" value="${escapeHtml(p.text)}" spellcheck="false"
      ${p.type === "int" || p.type === "float" ? 'inputmode="decimal"' : ""}>
    <span class="jt-field-error"></span></label>`;
}
