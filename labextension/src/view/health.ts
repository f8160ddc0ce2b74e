/**
 * What the run view and the runs list say about restarts, stalled ranks and NaN/inf values:
 * the attempt ("attempt 2 of 3"), a banner per stalled rank with its last step, how long it
 * has been stuck (kept current every second) and its stack, the attempts table, and the
 * first NaN/inf of each metric. The strings are pure (unit-tested in node); ``renderHealth``
 * and ``tickHealth`` put them into the view's elements.
 */
import { startedAt } from '../model';
import { escapeHtml } from './ansi.js';
import { formatDuration } from './chart.js';
import type { IAttempt, IDebugging, INonFinite, IRunState, IStall } from './runtraits';

export type { IAttempt, IDebugging, INonFinite, IStall };

/** "GPU idle: 2% at 60 W of 700 W". */
export function gpuIdleText(idle: NonNullable<IStall['gpu_idle']>): string {
  const watts = typeof idle.watts === 'number' ? ` at ${Math.round(idle.watts)} W${typeof idle.limit === 'number' ? ` of ${Math.round(idle.limit)} W` : ''}` : '';
  const share = idle.own ? ' of the SM time, its own' : '';
  return `GPU idle: ${Math.round(idle.util)}%${share}${watts}`;
}

export interface IFrame {
  name: string;
  file: string;
  line: number;
}

/** "attempt 2 of 3" (attempt 1 of ``maxRestarts`` + 1); null when restarts are not in play. */
export function attemptLabel(attempt: number | null | undefined, maxRestarts: number): string | null {
  if (attempt === null || attempt === undefined || (!maxRestarts && attempt === 0)) return null;
  return maxRestarts ? `attempt ${attempt + 1} of ${maxRestarts + 1}` : `attempt ${attempt + 1}`;
}

/** "42 s" under a minute, else a clock ("1:02"). */
export function formatStallTime(seconds: number | null | undefined): string {
  if (seconds === null || seconds === undefined || !Number.isFinite(seconds)) return '–';
  return seconds < 59.5 ? `${Math.max(0, Math.round(seconds))} s` : formatDuration(seconds);
}

/** Where a py-spy dump says the rank is: the innermost frame of its main thread (else of
 * its first thread). */
export function topFrame(stack: string | null | undefined): IFrame | null {
  if (!stack) return null;
  const lines = stack.split('\n');
  const main = lines.findIndex(l => /^Thread .*"MainThread"/.test(l));
  const from = main >= 0 ? main + 1 : Math.max(0, lines.findIndex(l => l.startsWith('Thread ')) + 1);
  for (const line of lines.slice(from)) {
    if (line.startsWith('Thread ')) break;
    const m = /^\s+(\S.*?) \((.+):(\d+)\)\s*$/.exec(line);
    if (m) return { name: m[1], file: m[2], line: Number(m[3]) };
  }
  return null;
}

/** The runs list's badge: "stalled: rank 1", "stalled: ranks 1, 3", "stalled: 5 ranks". */
export function stallBadge(stalled: Array<{ rank: number }> | null | undefined): string | null {
  if (!stalled?.length) return null;
  if (stalled.length === 1) return `stalled: rank ${stalled[0].rank}`;
  if (stalled.length <= 3) return `stalled: ranks ${stalled.map(s => s.rank).join(', ')}`;
  return `stalled: ${stalled.length} ranks`;
}

/** The badge's tooltip: each stalled rank, how long and after which step. */
export function stallTitle(stalled: IStall[] | null | undefined): string {
  return (stalled || []).map(s => `rank ${s.rank}: no progress for ${formatStallTime(s.seconds)}` +
    (s.last_step !== null && s.last_step !== undefined ? ` after step ${s.last_step}` : '') +
    (s.waiting ? ', waits for a peer' : '')).join('\n');
}

/** "loss became NaN at step 15 on rank 0". */
export function nonFiniteText(fact: INonFinite): string {
  const value = fact.value === 'nan' ? 'NaN' : fact.value;
  const step = fact.step !== null && fact.step !== undefined ? ` at step ${fact.step}` : '';
  return `${fact.metric} became ${value}${step} on rank ${fact.rank}`;
}

const time = (since: number | null, seconds: number | null): string =>
  since !== null && since !== undefined
    ? `<span class="jt-stall-for" data-since="${since}"></span>`
    : `<span class="jt-stall-for">${formatStallTime(seconds)}</span>`;

/** Where a stalled rank is: in the user's own code where the supervisor found it there,
 * else the innermost frame of its stack (a rank that waits in a collective is in torch). */
export function whereInCode(s: IStall): IFrame | null {
  return s.frame ? { name: s.frame.function, file: s.frame.file, line: s.frame.line } : topFrame(s.stack);
}

function frameHtml(frame: IFrame | null): string {
  return frame ? ` in <code class="jt-frame">${escapeHtml(frame.name)}</code> <span class="jt-muted">(${escapeHtml(frame.file)}:${frame.line})</span>` : '';
}

function stackDetails(rank: number | string, stack: string | null | undefined, label: string): string {
  if (!stack) return '';
  return `<details data-rank="${escapeHtml(String(rank))}"><summary>${escapeHtml(label)}</summary><pre class="jt-traceback">${escapeHtml(stack)}</pre></details>`;
}

/** The stall banner: each stalled rank (the hanging ones first) with its last step, host,
 * top frame and stack; times are left empty for ``tickHealth`` to fill. */
export function stallHtml(stalled: IStall[], opts: { running: boolean; timeout?: number | null; onStall?: string | null }): string {
  if (!stalled.length) return '';
  const culprits = stalled.filter(s => !s.waiting);
  const ranks = stalled.map(s => s.rank).join(', ');
  let title = stalled.length === 1
    ? `Rank ${stalled[0].rank} ${opts.running ? 'is stalled' : 'was stalled when the run ended'}`
    : `Ranks ${ranks} ${opts.running ? 'are stalled' : 'were stalled when the run ended'}`;
  if (culprits.length && culprits.length < stalled.length) {
    title += ` — ${culprits.length === 1 ? `rank ${culprits[0].rank} hangs` : `ranks ${culprits.map(s => s.rank).join(', ')} hang`}, the others wait for it in a collective`;
  }
  const policy = opts.timeout ? `no progress for ${formatStallTime(opts.timeout)} counts as a stall; ` +
    (opts.onStall === 'cancel' ? 'the run is ended with the stacks saved (--on-stall cancel)' : 'the run goes on (--on-stall warn)') : '';
  const rows = stalled.map(s => {
    const step = s.last_step !== null && s.last_step !== undefined ? `after step <b>${escapeHtml(String(s.last_step))}</b>` : 'before its first step';
    const host = s.host ? ` on <b>${escapeHtml(s.host)}</b>` : '';
    const waiting = s.waiting ? ' <span class="jt-stall-tag">waits for a peer</span>' : '';
    const gpu = s.gpu_idle ? ` <span class="jt-stall-tag" data-testid="jt-gpu-idle" title="its GPU has been idle while the other ranks' GPUs work">${escapeHtml(gpuIdleText(s.gpu_idle))}</span>` : '';
    const what = s.gpu_idle ? 'GPU idle for' : 'no progress for';
    return `<li class="jt-stall-rank" data-rank="${s.rank}"><div><b>Rank ${s.rank}</b>: ${what} ${time(s.since, s.seconds)} ${step}${host}${frameHtml(whereInCode(s))}${waiting}${gpu}</div>` +
      stackDetails(s.rank, s.stack, `Stack of rank ${s.rank}`) + '</li>';
  });
  return `<div class="jt-stall-title">⚠ ${escapeHtml(title)}</div>` +
    (policy ? `<div class="jt-muted jt-stall-policy">${escapeHtml(policy)}</div>` : '') +
    `<ul class="jt-stall-list">${rows.join('')}</ul>`;
}

/** The stacks saved when the run was ended because of a stall. */
export function savedStacksHtml(stacks: { [rank: string]: string | null } | null | undefined): string {
  const ranks = Object.keys(stacks || {});
  if (!stacks || !ranks.length) return '';
  return `<div class="jt-stall-title">⚠ The run was ended after a stall; the stacks of rank${ranks.length > 1 ? 's' : ''} ${escapeHtml(ranks.join(', '))} then:</div>` +
    `<ul class="jt-stall-list">${ranks.map(r => `<li class="jt-stall-rank" data-rank="${escapeHtml(r)}"><div><b>Rank ${escapeHtml(r)}</b>${frameHtml(topFrame(stacks[r]))}</div>${stackDetails(r, stacks[r], `Stack of rank ${r}`)}</li>`).join('')}</ul>`;
}

/** The attempts table: when each started, how long it ran and how it ended. The running
 * attempt's time is left for ``tickHealth``. */
export function attemptsHtml(attempts: IAttempt[], maxRestarts: number, state: { status?: string; ended?: number | null }, now: number): string {
  if (!attempts.length || (!maxRestarts && attempts.length < 2)) return '';
  const rows = attempts.map((a, i) => {
    const last = i === attempts.length - 1;
    const end = a.end ?? (last ? state.ended ?? null : null);
    const live = last && end === null && a.start !== null && state.status === 'running';
    const ran = live ? `<span class="jt-attempt-ran" data-start="${a.start}"></span>`
      : end !== null && a.start !== null ? formatDuration(end - a.start) : '–';
    const failed = a.failed_rank !== null && a.failed_rank !== undefined;
    const outcome = failed || a.error
      ? `${failed ? `rank ${a.failed_rank} failed` : 'failed'}${a.error ? `: ${a.error}` : ''}`
      : last ? state.status || '' : 'ended';
    const cls = failed || a.error ? 'jt-attempt-failed' : last ? 'jt-attempt-current' : '';
    return `<tr class="${cls}" data-attempt="${a.attempt}"><td>${a.attempt + 1}</td>` +
      `<td>${a.start !== null ? escapeHtml(startedAt(a.start, now)) : '–'}</td><td>${ran}</td>` +
      `<td class="jt-attempt-outcome" title="${escapeHtml(outcome)}">${escapeHtml(outcome)}</td></tr>`;
  });
  const allowed = maxRestarts ? ` <span class="jt-muted">${attempts.length} of ${maxRestarts + 1} allowed (--max-restarts ${maxRestarts})</span>` : '';
  return `<div class="jt-section-head"><span class="jt-section-title">Attempts</span>${allowed}</div>` +
    `<table class="jt-attempts-table"><thead><tr><th>Attempt</th><th>Started</th><th>Ran</th><th>Outcome</th></tr></thead><tbody>${rows.join('')}</tbody></table>`;
}

/** The first NaN/inf of each metric, and whether it fails the run. */
export function nonFiniteHtml(facts: INonFinite[], stopOnNan: string[]): string {
  return facts.map(f => `<div class="jt-nonfinite-item" data-metric="${escapeHtml(f.metric)}">⚠ ${escapeHtml(nonFiniteText(f))}` +
    (stopOnNan.includes(f.metric) ? ' <span class="jt-muted">(--stop-on-nan: fails the run)</span>' : '') + '</div>').join('');
}

/** The banner of the ranks that wait in a debugger, and how to attach to them. */
export function debuggingHtml(waiting: IDebugging[], runId: string): string {
  if (!waiting.length) return '';
  const id = escapeHtml(runId || 'RUN');
  const rows = waiting.map(d => {
    const host = d.host ? ` on <b>${escapeHtml(d.host)}</b>` : '';
    const who = d.attached ? ' — <span class="jt-muted">someone is attached</span>' : '';
    return `<div class="jt-stall-row" data-rank="${escapeHtml(String(d.rank))}"><b>Rank ${escapeHtml(String(d.rank))}</b>${host}: ${escapeHtml(d.where || 'stopped')}${who}</div>`;
  });
  const title = waiting.length === 1 ? `Rank ${waiting[0].rank} waits in a debugger` : `Ranks ${waiting.map(d => d.rank).join(', ')} wait in a debugger`;
  return `<div class="jt-stall-title" data-testid="jt-debugging"><span class="jt-debug-tag">pdb</span> ${escapeHtml(title)}</div>` + rows.join('') +
    `<div class="jt-muted">attach in a terminal with <code>jupyter-trainer debug ${id}</code>, or with <code>%train debug ${id}</code> in a notebook whose kernel is free (a <code>%%train</code> cell that waits for this run offers pdb in its own input box); the other ranks are held meanwhile</div>`;
}

export interface IHealthParts {
  stall: HTMLElement;
  attempts: HTMLElement;
  chip: HTMLElement;
  nonFinite: HTMLElement;
}

/** Replace ``el``'s content only when it changed, keeping the stacks the reader opened. */
function update(el: HTMLElement, html: string): void {
  el.hidden = !html;
  if (el.dataset.html === html) return;
  const open = new Set([...el.querySelectorAll('details[open]')].map(d => (d as HTMLElement).dataset.rank));
  el.innerHTML = html;
  el.dataset.html = html;
  el.querySelectorAll('details').forEach(d => {
    if (open.has((d as HTMLElement).dataset.rank)) d.open = true;
  });
}

/** Draw the restarts, stalls and NaN/inf facts of ``state`` (a view's state payload). */
/** The verdict of the ranks' collective dumps (``Run.collectives()``): which rank is behind,
 * in which collective, or which call differs; empty when nothing is wrong. */
export function collectivesHtml(found: IRunState['collectives']): string {
  if (!found?.verdict) return '';
  return `<div class="jt-collectives" data-testid="jt-collectives">⚠ Collectives: ${escapeHtml(found.verdict)}</div>`;
}

export function renderHealth(parts: IHealthParts, state: IRunState, now: number, runId = ''): void {
  const attempts: IAttempt[] = state.attempts || [];
  const maxRestarts: number = state.max_restarts || 0;
  const running = state.status === 'running';
  const stalled: IStall[] = state.stalled || [];
  const debugging: IDebugging[] = running ? state.debugging || [] : [];
  update(parts.stall, (debugging.length
    ? debuggingHtml(debugging, runId)
    : stalled.length
      ? stallHtml(stalled, { running, timeout: state.stall_timeout, onStall: state.on_stall })
      : savedStacksHtml(state.stacks)) + collectivesHtml(state.collectives));
  update(parts.attempts, attemptsHtml(attempts, maxRestarts, state, now));
  const last = attempts.length ? attempts[attempts.length - 1] : null;
  const label = attemptLabel(last ? last.attempt : null, maxRestarts);
  parts.chip.hidden = !label;
  parts.chip.textContent = label || '';
  parts.chip.classList.toggle('jt-attempt-restarted', !!last && last.attempt > 0);
  update(parts.nonFinite, nonFiniteHtml(state.non_finite || [], state.stop_on_nan || []));
}

/** Keep the stall times and the running attempt's time current (``now`` in the feeder's
 * clock; the run's end once it ended). */
export function tickHealth(parts: IHealthParts, now: number): void {
  parts.stall.querySelectorAll<HTMLElement>('.jt-stall-for[data-since]').forEach(el => {
    el.textContent = formatStallTime(now - Number(el.dataset.since));
  });
  parts.attempts.querySelectorAll<HTMLElement>('.jt-attempt-ran[data-start]').forEach(el => {
    el.textContent = formatDuration(now - Number(el.dataset.start));
  });
}
