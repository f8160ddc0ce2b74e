/**
 * What the run view's head says of how a run was launched: its hyperparameters as the user
 * wrote them, and whether it has a backend to name. Pure, so it is unit-tested in node.
 */
import type { IRunInfo } from './runtraits';

/** The most characters of a value a chip shows; the whole value is in its tooltip. */
export const PARAM_CHARS = 40;

/** A number as it was written: 0.001, not the 0.0010000000000000002 arithmetic left. */
function numberText(v: number): string {
  if (!Number.isFinite(v)) return Number.isNaN(v) ? 'nan' : v > 0 ? 'inf' : '-inf';
  return String(Number(v.toPrecision(12)));
}

/** A value inside a list or dict, as Python writes it there (strings quoted). */
function nested(v: unknown): string {
  if (typeof v === 'string') return `'${v.replace(/\\/g, '\\\\').replace(/'/g, "\\'")}'`;
  return paramText(v);
}

/** A hyperparameter's value as the user wrote it: numbers rounded to what they typed,
 * strings without quotes, True, False and None as in Python, lists and dicts as literals. */
export function paramText(v: unknown): string {
  if (v === null || v === undefined) return 'None';
  if (v === true) return 'True';
  if (v === false) return 'False';
  if (typeof v === 'number') return numberText(v);
  if (typeof v === 'string') return v;
  if (Array.isArray(v)) return `[${v.map(nested).join(', ')}]`;
  if (typeof v === 'object') return `{${Object.entries(v as object).map(([k, x]) => `${nested(k)}: ${nested(x)}`).join(', ')}}`;
  return String(v);
}

/** A chip's text, cut at ``PARAM_CHARS`` with an ellipsis, and its tooltip, whole. */
export function paramChip(name: string, v: unknown): { text: string; title: string } {
  const whole = paramText(v);
  const text = whole.length > PARAM_CHARS ? `${whole.slice(0, PARAM_CHARS - 1)}…` : whole;
  return { text, title: `${name} = ${whole}` };
}

/** Whether the run has a collective backend to name: not one process started by the
 * python launcher, which joins no process group. */
export function showsBackend(info: IRunInfo): boolean {
  if (!info.backend) return false;
  const one = (info.nodes ?? 1) * (info.procs ?? 1) <= 1;
  return !(one && (info.launcher || '').startsWith('python'));
}
