// The launch form: where and how to run, and one typed input per hyperparameter the cell
// reads. Values are checked here as the user types (the kernel checks them again) and sent
// as text, so "1e-3" or a long integer reaches Python exactly as typed.
import { escapeHtml } from "./ansi.js";
import type { IViewModel } from "./viewmodel";
import { part } from "./viewparts";

/** The kinds of hyperparameter the kernel's launcher reads (``LaunchForm.kinds``). */
type ParamKind = "int" | "float" | "str" | "bool" | "list" | "dict" | "json";

/** One hyperparameter the cell reads: its notebook value, and that value as text. */
interface IFormParam {
  name: string;
  type: ParamKind;
  value: unknown;
  text: string;
}

/** The ``form`` trait: ``LaunchForm.schema()`` in the kernel. */
interface IFormSchema {
  params?: IFormParam[];
  name?: string;
  targets?: string[];
  target?: string;
  nodes?: number;
  procs?: number;
  launchers?: string[];
  launcher?: string;
  environments?: { value: string; label: string }[];
  environment?: string;
}

/** Problems by field name (a parameter, ``nodes``, ``procs``), ``_`` for the whole form. */
type FormErrors = { [field: string]: string };

/** The launch form's traits (``TrainWidget`` in the kernel). */
export interface IFormTraits {
  form: IFormSchema;
  form_errors: FormErrors;
  form_busy: boolean;
}

/** The launch options sent with the values, by the name of their form field. */
const OPTIONS = ["name", "target", "nodes", "procs", "launcher", "env"] as const;

const CHECKS: { [kind in ParamKind]: (text: string) => string | null } = {
  int: (t) => (/^\s*[+-]?\d+\s*$/.test(t) ? null : "a whole number"),
  float: (t) => (t.trim() !== "" && Number.isFinite(Number(t)) ? null : "a number"),
  str: () => null,
  bool: () => null,
  list: (t) => jsonCheck(t, (v) => Array.isArray(v), "a JSON list, e.g. [1, 2]"),
  dict: (t) => jsonCheck(t, (v) => v !== null && typeof v === "object" && !Array.isArray(v), 'a JSON object, e.g. {"a": 1}'),
  json: (t) => jsonCheck(t, () => true, "a JSON value (null, a number, \"text\", …)"),
};

function jsonCheck(text: string, ok: (value: unknown) => boolean, what: string): string | null {
  try {
    return ok(JSON.parse(text)) ? null : what;
  } catch {
    return what;
  }
}

function positiveInt(text: string): string | null {
  return /^\s*\d+\s*$/.test(text) && Number(text) >= 1 ? null : "a whole number ≥ 1";
}

function option(value: string, label: string, selected: boolean): string {
  return `<option value="${escapeHtml(value)}"${selected ? " selected" : ""}>${escapeHtml(label)}</option>`;
}

/** The launch form in ``root``, fed by ``model``; returns what takes it down. */
export function renderForm(root: HTMLElement, model: IViewModel<IFormTraits>): () => void {
  const form: IFormSchema = model.get("form") || {};
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
  const el = part<HTMLFormElement>(root, "form");
  const launch = part<HTMLButtonElement>(el, "[data-testid=jt-launch]");
  const status = part<HTMLElement>(el, ".jt-form-status");
  const general = part<HTMLElement>(el, ".jt-form-error");
  const paramInput = (name: string): HTMLInputElement | null => el.querySelector<HTMLInputElement>(`[data-param="${CSS.escape(name)}"]`);
  const field = (name: string): HTMLInputElement | HTMLSelectElement | null => {
    const named = el.elements.namedItem(name);
    return named instanceof HTMLInputElement || named instanceof HTMLSelectElement ? named : null;
  };

  const fieldChecks = (): FormErrors => {
    const errors: FormErrors = {};
    for (const p of params) {
      if (p.type === "bool") continue;
      const problem = CHECKS[p.type](paramInput(p.name)?.value ?? "");
      if (problem) errors[p.name] = `${p.name} must be ${problem}`;
    }
    for (const key of ["nodes", "procs"]) {
      const problem = positiveInt(field(key)?.value ?? "");
      if (problem) errors[key] = `${key} must be ${problem}`;
    }
    return errors;
  };
  const showErrors = (errors: FormErrors): void => {
    for (const n of el.querySelectorAll(".jt-field-error")) n.textContent = "";
    for (const n of el.querySelectorAll(".jt-invalid")) n.classList.remove("jt-invalid");
    for (const [key, text] of Object.entries(errors)) {
      if (key === "_") continue;
      const input = paramInput(key) || field(key);
      if (!input) continue;
      input.classList.add("jt-invalid");
      const slot = input.closest("label")?.querySelector(".jt-field-error");
      if (slot) slot.textContent = text;
    }
    general.hidden = !errors._;
    general.textContent = errors._ || "";
  };
  const refresh = (): void => {
    const errors = fieldChecks();
    const busy = Boolean(model.get("form_busy"));
    showErrors({ ...(model.get("form_errors") || {}), ...errors });
    launch.disabled = Object.keys(errors).length > 0 || busy;
    status.textContent = busy ? "launching…" : "";
  };
  el.addEventListener("input", refresh);
  el.addEventListener("submit", (event) => {
    event.preventDefault();
    if (Object.keys(fieldChecks()).length) {
      refresh();
      return;
    }
    const values: { [name: string]: string | boolean } = {};
    for (const p of params) {
      const input = paramInput(p.name);
      if (input) values[p.name] = p.type === "bool" ? input.checked : input.value;
    }
    const options: { [key: string]: string } = {};
    for (const key of OPTIONS) options[key] = field(key)?.value ?? "";
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

function paramField(p: IFormParam): string {
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
