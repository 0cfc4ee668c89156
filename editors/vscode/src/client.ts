/**
 * The LanguageClient for `k3lsp` over stdio, built from the current settings.
 *
 * A new client is built on every (re)start because vscode-languageclient keeps the server
 * command and initializationOptions it was constructed with; `client.restart()` would keep a
 * stale `k3lsp.server.path`.
 */
import * as vscode from "vscode";
import {
  ClientCapabilities,
  DocumentSelector,
  ExecuteCommandOptions,
  ExecuteCommandRequest,
  LanguageClient,
  LanguageClientOptions,
  Middleware,
  RegistrationData,
  ServerOptions,
  StaticFeature,
} from "vscode-languageclient/node";
import { SYNCHRONIZED_SETTINGS, SettingsView, serverCommand, serverSection, serverSettings } from "./config";

/** C sources, plus headers whatever language VS Code gives them (`.h` often opens as cpp). */
export const DOCUMENT_SELECTOR: DocumentSelector = [
  { scheme: "file", language: "c" },
  { scheme: "file", pattern: "**/*.h" },
];

/** Answers `workspace/configuration` for section "k3lsp" with the server's keys only (see serverSection). */
export const CONFIGURATION_MIDDLEWARE: Middleware = {
  workspace: {
    async configuration(params, token, next) {
      const result = await next(params, token);
      if (!Array.isArray(result)) {
        return result;
      }
      return result.map((value, index) => (params.items[index]?.section === "k3lsp" ? serverSection(value) : value));
    },
  },
};

/**
 * VS Code shows the diagnostic under the pointer in every hover; the server is told so (an experimental client
 * capability) and leaves the title, message and trace out of its own hover, which would repeat them.
 */
export const HOVER_SHOWS_DIAGNOSTICS: StaticFeature = {
  fillClientCapabilities(capabilities: ClientCapabilities): void {
    const experimental = (capabilities.experimental ?? {}) as Record<string, unknown>;
    capabilities.experimental = { ...experimental, k3lsp: { hoverShowsDiagnostics: true } };
  },
  initialize(): void {},
  getState: () => ({ kind: "static" }),
  clear(): void {},
};

/**
 * The channel the client traces to. vscode-languageclient traces only while its channel's log level is Trace,
 * so `k3lsp.trace.server` alone would do nothing; this channel's level follows that setting instead, and its
 * lines are kept whatever the workbench's log level.
 */
export function traceChannel(lines: vscode.OutputChannel, traceSetting: () => unknown): vscode.LogOutputChannel {
  const changed = new vscode.EventEmitter<vscode.LogLevel>();
  const level = () => (traceSetting() === "off" ? vscode.LogLevel.Info : vscode.LogLevel.Trace);
  const watch = vscode.workspace.onDidChangeConfiguration((event) => {
    if (event.affectsConfiguration("k3lsp.trace.server")) {
      changed.fire(level());
    }
  });
  const write = (message: string) => lines.appendLine(message);
  return {
    name: lines.name,
    get logLevel() {
      return level();
    },
    onDidChangeLogLevel: changed.event,
    append: (value: string) => lines.append(value),
    appendLine: write,
    replace: (value: string) => lines.replace(value),
    clear: () => lines.clear(),
    show: (preserveFocus?: boolean) => lines.show(preserveFocus),
    hide: () => lines.hide(),
    dispose: () => {
      watch.dispose();
      changed.dispose();
    },
    trace: write,
    debug: write,
    info: write,
    warn: write,
    error: (error: string | Error) => write(String(error)),
  } as vscode.LogOutputChannel;
}

/**
 * The channel as the client library gets it: writes after the workbench closed it are dropped. The library
 * still logs when a failed server's streams close, which can come after deactivation, and VS Code throws
 * "Channel has been closed" for those, as unhandled rejections in the extension host.
 */
export function quietWhenClosed(channel: vscode.LogOutputChannel): vscode.LogOutputChannel {
  return new Proxy(channel, {
    get(target, property, receiver) {
      const value = Reflect.get(target, property, receiver);
      if (typeof value !== "function") {
        return value;
      }
      return (...args: unknown[]) => {
        try {
          return Reflect.apply(value, target, args);
        } catch {
          return undefined; // closed
        }
      };
    },
  });
}

export function createClient(
  settings: SettingsView,
  outputChannel: vscode.LogOutputChannel,
  traceOutputChannel: vscode.LogOutputChannel,
): LanguageClient {
  const { command, args } = serverCommand(settings);
  // No `transport`: TransportKind.stdio would append `--stdio`, while `k3lsp` with no arguments is stdio.
  const serverOptions: ServerOptions = { command, args };
  const clientOptions: LanguageClientOptions = {
    documentSelector: DOCUMENT_SELECTOR,
    initializationOptions: serverSettings(settings),
    // Individual keys rather than the "k3lsp" section: the client then sends only the server's keys
    // (as {k3lsp: {...}}), skipping empty ones, instead of `server.*`, `trace.*` and `endpoint: ""`.
    synchronize: { configurationSection: [...SYNCHRONIZED_SETTINGS] },
    middleware: CONFIGURATION_MIDDLEWARE,
    outputChannel: quietWhenClosed(outputChannel),
    traceOutputChannel: quietWhenClosed(traceOutputChannel),
  };
  const client = new LanguageClient("k3lsp", "k3lsp", serverOptions, clientOptions);
  client.registerFeature(HOVER_SHOWS_DIAGNOSTICS);
  return client;
}

/**
 * Stop the client from registering VS Code commands the extension already registered.
 *
 * vscode-languageclient registers a VS Code command for every command the server advertises in
 * `executeCommandProvider`; for `k3lsp.auditFile` and `k3lsp.auditWorkspace` that id is already
 * taken by this extension (which adds the active document's uri), and the duplicate
 * registration throws and fails the client start. Other server commands (code-action commands
 * such as explain or suppress) must still be registered, so only `owned` ids are dropped.
 */
export function skipOwnedCommands(client: LanguageClient, owned: readonly string[]): void {
  const feature = client.getFeature(ExecuteCommandRequest.method);
  const register = feature.register.bind(feature);
  feature.register = (data: RegistrationData<ExecuteCommandOptions>) => {
    const commands = data.registerOptions.commands.filter((command) => !owned.includes(command));
    register({ ...data, registerOptions: { ...data.registerOptions, commands } });
  };
}
