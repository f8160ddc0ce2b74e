/**
 * The cost meter's words (views/cost.py computes the figures): "$1.23 so far · $4.56 when
 * done". A one-character currency goes before the figure, a code after it.
 */

export function money(value: number, currency: string): string {
  const figure = value >= 0.01 || value === 0 ? value.toLocaleString('en-US', { minimumFractionDigits: 2, maximumFractionDigits: 2 }) : value.toFixed(4);
  return currency.length === 1 ? `${currency}${figure}` : `${figure} ${currency}`;
}

export function costText(cost: { so_far: number; projected: number | null; currency: string }): string {
  const now = `${money(cost.so_far, cost.currency)} so far`;
  return cost.projected === null || cost.projected === undefined ? now : `${now} · ${money(cost.projected, cost.currency)} when done`;
}
