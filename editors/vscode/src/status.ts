/**
 * The backend state the server pushes as `k3lsp/status`, turned into status bar text.
 *
 * Kept free of VS Code types so every state's text can be unit-tested; extension.ts only copies
 * a `StatusView` onto the status bar item.
 */

export const STATUS_NOTIFICATION = "k3lsp/status";

export const DAEMON_STATES = ["disconnected", "connecting", "loading", "connected", "down", "unauthorized"] as const;
export type DaemonState = (typeof DAEMON_STATES)[number];

/** Params of the `k3lsp/status` notification. */
export interface DaemonStatus {
  state: DaemonState;
  queued: number;
  running: number;
  message?: string;
  /** With state `loading`: how much of the model the daemon has read, 0..100 (absent when it did not say). */
  percent?: number;
  /** Findings of the open files silenced by `k3-audit: ignore` comments, and by the workspace baseline. */
  suppressed?: number;
  baselined?: number;
}

/** What the status bar item shows. `error` selects the error background colour. */
export interface StatusView {
  text: string;
  tooltip: string;
  error: boolean;
}

const CLICK_HINT = "Click for the backend status.";

function isCount(value: unknown): value is number {
  return typeof value === "number" && Number.isInteger(value) && value >= 0;
}

/** Validates the notification params; a server bug must not show nonsense like "NaN queued". */
export function parseStatus(params: unknown): DaemonStatus {
  if (typeof params !== "object" || params === null) {
    throw new Error(`k3lsp/status: expected an object, got ${JSON.stringify(params)}`);
  }
  const p = params as Record<string, unknown>;
  if (!DAEMON_STATES.includes(p.state as DaemonState)) {
    throw new Error(`k3lsp/status: unknown state ${JSON.stringify(p.state)}`);
  }
  if (!isCount(p.queued) || !isCount(p.running)) {
    throw new Error(`k3lsp/status: queued and running must be counts, got ${JSON.stringify(params)}`);
  }
  if (p.message !== undefined && p.message !== null && typeof p.message !== "string") {
    throw new Error(`k3lsp/status: message must be a string, got ${JSON.stringify(p.message)}`);
  }
  if (p.percent !== undefined && p.percent !== null && !(isCount(p.percent) && p.percent <= 100)) {
    throw new Error(`k3lsp/status: percent must be 0..100, got ${JSON.stringify(p.percent)}`);
  }
  return {
    state: p.state as DaemonState,
    queued: p.queued,
    running: p.running,
    message: p.message ?? undefined,
    percent: p.percent ?? undefined,
    suppressed: isCount(p.suppressed) ? p.suppressed : undefined,
    baselined: isCount(p.baselined) ? p.baselined : undefined,
  };
}

/** `2 findings silenced: 1 by k3-audit: ignore comments, 1 by the baseline`, or nothing when none is. */
function silencedText(status: DaemonStatus): string | undefined {
  const [comments, baseline] = [status.suppressed ?? 0, status.baselined ?? 0];
  if (comments + baseline === 0) {
    return undefined;
  }
  const total = comments + baseline;
  return `${total} finding${total === 1 ? "" : "s"} silenced: ${comments} by k3-audit: ignore comments, ${baseline} by the baseline.`;
}

/** `3 running, 1 queued` for the tooltip; the status bar itself says `auditing 4`. */
function workText(status: DaemonStatus): string {
  const parts: string[] = [];
  if (status.running > 0) {
    parts.push(`${status.running} running`);
  }
  if (status.queued > 0) {
    parts.push(`${status.queued} queued`);
  }
  return parts.join(", ");
}

function tooltip(headline: string, message: string | undefined): string {
  return [headline, message, CLICK_HINT].filter(Boolean).join("\n");
}

export function statusView(status: DaemonStatus): StatusView {
  const view = stateView(status);
  const silenced = silencedText(status);
  return silenced ? { ...view, tooltip: view.tooltip.replace(CLICK_HINT, `${silenced}\n${CLICK_HINT}`) } : view;
}

function stateView(status: DaemonStatus): StatusView {
  const work = workText(status);
  const pending = status.running + status.queued;
  switch (status.state) {
    case "connected":
      return {
        text: pending ? `$(sync~spin) k3: auditing ${pending}` : "$(shield) k3: idle",
        tooltip: tooltip(`k3 audit backend connected${work ? `: ${work}` : ", nothing to audit"}.`, status.message),
        error: false,
      };
    case "disconnected":
      return {
        text: "$(circle-outline) k3: not connected",
        tooltip: tooltip("Not connected to the k3 audit backend yet.", status.message),
        error: false,
      };
    case "connecting":
      return {
        text: "$(sync~spin) k3: connecting",
        tooltip: tooltip(`Connecting to the k3 audit backend${work ? ` (${work})` : ""}.`, status.message),
        error: false,
      };
    case "loading":
      return {
        text: `$(sync~spin) k3: backend loading${status.percent === undefined ? "" : ` (${status.percent} %)`}`,
        tooltip: tooltip(
          `The k3 audit backend is loading its model; audits wait for it${work ? ` (${work})` : ""}.`,
          status.message,
        ),
        error: false,
      };
    case "down":
      return {
        text: "$(error) k3: backend unreachable",
        tooltip: tooltip("The k3 audit backend is unreachable; cached findings stay shown.", status.message),
        error: true,
      };
    case "unauthorized":
      return {
        text: "$(lock) k3: key refused",
        tooltip: tooltip(
          "The k3 audit backend refused this client's key (k3lsp.serverKey / k3lsp.clientKey).",
          status.message,
        ),
        error: true,
      };
  }
}

/** Before the server has said anything. */
export const STARTING_VIEW: StatusView = {
  text: "$(sync~spin) k3: starting",
  tooltip: tooltip("Starting the k3lsp language server.", undefined),
  error: false,
};

/** The server runs but has not reported a backend state yet (it does right after starting). */
export const RUNNING_VIEW: StatusView = {
  text: "$(circle-outline) k3: not connected",
  tooltip: tooltip("The k3lsp language server is running; it has not contacted the audit backend yet.", undefined),
  error: false,
};

/** The language server process is not running (failed to start, crashed, or stopped); `why` goes in the tooltip. */
export function stoppedView(why?: string): StatusView {
  return {
    text: "$(error) k3: server stopped",
    tooltip: tooltip("The k3lsp language server is not running; see the k3lsp output channel.", why),
    error: true,
  };
}

/** A `k3lsp/status` notification that failed `parseStatus`. */
export function invalidStatusView(error: Error): StatusView {
  return { text: "$(warning) k3: bad status", tooltip: tooltip(error.message, undefined), error: true };
}

function record(value: unknown): Record<string, unknown> | undefined {
  return typeof value === "object" && value !== null && !Array.isArray(value)
    ? (value as Record<string, unknown>)
    : undefined;
}

function percent(value: unknown): string {
  return typeof value === "number" ? `${(100 * value).toFixed(1)}%` : "unknown";
}

/**
 * Server or daemon text for a notification, shown as text: VS Code makes a link of `[text](target)` in a
 * notification's message and opens it with commands allowed (`command:...`), so no `](` reaches one. The server
 * breaks them in everything it sends too (k3lsp/wire/sanitize.py); this holds whatever the server is.
 */
export function plainText(text: string): string {
  return text.replace(/\]\(/g, "] (");
}

/**
 * One line from the `k3lsp.status` result: where the backend is, what it serves and how it is doing (the
 * daemon's own `status` reply, whose model name is the daemon's word); the full answer goes to the output channel.
 */
export function summarizeStatus(result: unknown): string {
  return plainText(statusLine(result));
}

function statusLine(result: unknown): string {
  const r = record(result);
  if (!r) {
    return `k3 backend status: ${JSON.stringify(result)}`;
  }
  const endpoint = typeof r.endpoint === "string" ? r.endpoint : "unknown";
  const backend = record(r.backend);
  if (!backend) {
    const why = typeof r.error === "string" ? r.error : "no answer";
    return `k3 backend at endpoint ${endpoint} is unreachable: ${why}`;
  }
  const loading = record(backend.loading);
  if (backend.state === "loading" && loading) {
    return (
      `k3 backend: endpoint ${endpoint}, model ${String(backend.model)}, loading ` +
      `(${String(loading.percent)} %, ${String(loading.stage)}, ${String(loading.seconds)} s so far)`
    ).slice(0, 400);
  }
  const line =
    `k3 backend: endpoint ${endpoint}, model ${String(backend.model)}, ranks ${String(backend.ranks)}, ` +
    `queue ${String(backend.queued)} (${String(backend.active)} active), ` +
    `loop rate ${percent(backend.loop_rate)}, stop rate ${percent(backend.stop_rate)}`;
  return line.length > 400 ? `${line.slice(0, 397)}...` : line;
}
