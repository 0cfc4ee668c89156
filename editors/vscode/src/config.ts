/**
 * Settings -> how to start the server and what to tell it.
 *
 * Pure functions over a `get(key)` view of the `k3lsp` configuration section, so they can be
 * tested without VS Code. The server keys are the ones package.json declares, which the language server's
 * schema generates: this file lists none of them.
 */
import * as os from "node:os";
import * as path from "node:path";

/** The part of `vscode.WorkspaceConfiguration` used here (a plain section object has no `inspect`). */
export interface SettingsView {
  get<T>(key: string): T | undefined;
  inspect?<T>(key: string): { defaultValue?: T; globalValue?: T } | undefined;
}

/**
 * The settings package.json declares (`contributes.configuration`): the server's keys there are generated from
 * the server's own schema (`python -m k3lsp.core.schema`, k3lsp/core/options.py), so this file names no server key
 * and every declared one reaches the server; a test fails when the manifest and the schema drift apart.
 */
const DECLARED: Record<string, { scope?: string }> = require("../package.json").contributes.configuration.properties;
const KEYS = Object.keys(DECLARED).map((id) => id.replace(/^k3lsp\./, ""));

/**
 * Settings that name a program to run, the daemon that receives the code, the keys that say who it is, or allow
 * an unproven one: the `machine`-scoped ones. The audited repository must not choose them, trusted or not: its own
 * `.vscode/settings.json` could send the code to its daemon (which answers with forged findings and "fixes") or
 * start its own program. So they are read from the user's settings (user or remote: `globalValue`) and the
 * defaults only, never from a workspace or folder; package.json restricts them in untrusted workspaces; the
 * server takes the connection ones from initializationOptions only.
 */
export const USER_ONLY: readonly string[] = KEYS.filter((key) => DECLARED[`k3lsp.${key}`].scope === "machine");

/** A setting's value; for a USER_ONLY one, the user's or the default, and nothing when scopes are unknown. */
function read(settings: SettingsView, key: string): unknown {
  if (!USER_ONLY.includes(key)) {
    return settings.get<unknown>(key);
  }
  const scopes = settings.inspect?.<unknown>(key);
  return scopes?.globalValue ?? scopes?.defaultValue;
}

/** Keys of the `k3lsp` section that the server reads: every declared one but the extension's own `server.*` and
 * `trace.*`. */
export const SERVER_KEYS: readonly string[] = KEYS.filter((key) => !/^(server|trace)\./.test(key));

/** The command line of the language server; no arguments means LSP on stdio. */
export interface ServerCommand {
  command: string;
  args: string[];
}

/** `~/x` -> `/home/me/x`: settings are typed by hand and VS Code does not expand `~`. */
export function expandHome(p: string): string {
  if (p === "~") {
    return os.homedir();
  }
  if (p.startsWith("~/")) {
    return path.join(os.homedir(), p.slice(2));
  }
  return p;
}

function setting(settings: SettingsView, key: string): string {
  const value = read(settings, key);
  return typeof value === "string" ? value.trim() : "";
}

/**
 * `k3lsp.server.python` wins over `k3lsp.server.path`: a virtualenv's interpreter is the
 * usual way to run a checkout, and `-m k3lsp` needs no console script on PATH. `-I` (isolated):
 * the server may start in the workspace, and a plain `-m` would import a `k3lsp/` directory of
 * the audited repository before the installed package.
 */
export function serverCommand(settings: SettingsView): ServerCommand {
  const python = setting(settings, "server.python");
  if (python) {
    return { command: expandHome(python), args: ["-I", "-m", "k3lsp"] };
  }
  return { command: expandHome(setting(settings, "server.path") || "k3lsp"), args: [] };
}

/** Setting ids the client keeps in sync with `workspace/didChangeConfiguration`: the USER_ONLY ones restart it. */
export const SYNCHRONIZED_SETTINGS: readonly string[] = SERVER_KEYS.filter((key) => !USER_ONLY.includes(key)).map(
  (key) => `k3lsp.${key}`,
);

/** What a running server was started with and cannot change: a different value means a restart. */
export function launchSettings(settings: SettingsView): string {
  return JSON.stringify({ command: serverCommand(settings), user: USER_ONLY.map((key) => read(settings, key)) });
}

function isUnset(value: unknown): boolean {
  return (
    value === undefined ||
    value === null ||
    (typeof value === "string" && value.trim() === "") ||
    (Array.isArray(value) && value.length === 0)
  );
}

/**
 * The server keys that are actually set, for initializationOptions and `workspace/configuration`.
 *
 * Empty strings, empty lists and null mean "the server's default" (e.g. endpoint from K3LSP_ENDPOINT),
 * and the server rejects `""` and `[]` as an endpoint, so they are left out. `server.*` and `trace.*` are dropped:
 * the server reports unknown keys as errors.
 */
export function serverSettings(settings: SettingsView): Record<string, unknown> {
  const options: Record<string, unknown> = {};
  for (const key of SERVER_KEYS) {
    const value = read(settings, key);
    if (!isUnset(value)) {
      options[key] = value;
    }
  }
  return options;
}

/**
 * `serverSettings` for the plain JSON object the client answers `workspace/configuration` with. It merges every
 * scope, so the USER_ONLY keys are left out (the server keeps what initializationOptions said).
 */
export function serverSection(section: unknown): unknown {
  if (typeof section !== "object" || section === null || Array.isArray(section)) {
    return section;
  }
  const values = section as Record<string, unknown>;
  return serverSettings({ get: <T>(key: string) => values[key] as T | undefined });
}
