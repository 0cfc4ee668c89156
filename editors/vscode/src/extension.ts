/**
 * Activation: one status bar item, one output channel, the four commands, and a client session
 * that (re)builds the LanguageClient from the current settings.
 */
import * as vscode from "vscode";
import { DidSaveTextDocumentNotification, LanguageClient, State } from "vscode-languageclient/node";
import { createClient, skipOwnedCommands, traceChannel } from "./client";
import { EXTENSION_COMMANDS, Session, registerCommands } from "./commands";
import { launchSettings, serverCommand } from "./config";
import {
  RUNNING_VIEW,
  STARTING_VIEW,
  STATUS_NOTIFICATION,
  StatusView,
  invalidStatusView,
  parseStatus,
  statusView,
  stoppedView,
} from "./status";

/** After a failed start, how often and how long the settings are read again for a different server command. */
const RETRY_MS = 2000;
const RETRY_FOR_MS = 120_000;

/** Maps a `k3lsp/status` notification to a view; a malformed one is shown, not thrown. */
function backendView(params: unknown): StatusView {
  try {
    return statusView(parseStatus(params));
  } catch (error) {
    return invalidStatusView(error instanceof Error ? error : new Error(String(error)));
  }
}

function errorMessage(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/** The documents the server audits: C sources, and `.h` headers whatever language they open as. */
function isAudited(document: vscode.TextDocument): boolean {
  return document.uri.scheme === "file" && (document.languageId === "c" || document.fileName.endsWith(".h"));
}

class ClientSession implements Session {
  private current: LanguageClient | undefined;
  private pending: Promise<void> = Promise.resolve();
  /** Files saved while no server ran: their saves are sent once one runs, so none is lost. */
  private readonly unsentSaves = new Set<string>();
  private retry: NodeJS.Timeout | undefined;
  /** `launchSettings` of the current client: the server command and the USER_ONLY settings it was given. */
  private launched: string | undefined;

  constructor(
    readonly output: vscode.LogOutputChannel,
    private readonly trace: vscode.LogOutputChannel,
    private readonly item: vscode.StatusBarItem,
  ) {}

  client(): LanguageClient | undefined {
    return this.current;
  }

  /** Serialised, so two quick restarts (command + settings change) cannot leave two servers running. */
  restart(): Promise<void> {
    this.pending = this.pending.catch(() => undefined).then(async () => {
      await this.stop();
      await this.start();
    });
    return this.pending;
  }

  saved(document: vscode.TextDocument): void {
    if (!this.current?.isRunning() && isAudited(document)) {
      this.unsentSaves.add(document.uri.toString());
    }
  }

  /** Never throws: at deactivation the workbench may already have closed the output channel. */
  async stop(): Promise<void> {
    this.stopRetrying();
    const client = this.current;
    this.current = undefined;
    if (!client?.needsStop()) {
      return; // never got running (e.g. the server exited at once): there is nothing to stop
    }
    try {
      await client.dispose();
    } catch (error) {
      this.log(`k3lsp: stopping the language server: ${errorMessage(error)}`);
    }
  }

  private log(line: string): void {
    try {
      this.output.appendLine(line);
    } catch {
      // the channel is already closed (deactivation)
    }
  }

  /** A settings change: restart when the server was started with something that changed, else it reads it. */
  changed(): void {
    if (launchSettings(vscode.workspace.getConfiguration("k3lsp")) !== this.launched) {
      void this.restart();
    }
  }

  private async start(): Promise<void> {
    const settings = vscode.workspace.getConfiguration("k3lsp");
    const { command } = serverCommand(settings);
    this.launched = launchSettings(settings);
    const client = createClient(settings, this.output, this.trace);
    skipOwnedCommands(client, EXTENSION_COMMANDS);
    let reported = false; // a backend state from this client wins over "running"
    client.onNotification(STATUS_NOTIFICATION, (params: unknown) => {
      reported = true;
      this.show(backendView(params));
    });
    client.onDidChangeState(({ newState }) => {
      if (newState === State.Stopped) {
        this.show(stoppedView());
      } else if (newState === State.Starting) {
        reported = false; // the client restarts a crashed server itself: its old state is gone
        this.show(STARTING_VIEW);
      } else if (newState === State.Running && !reported) {
        this.show(RUNNING_VIEW);
      }
    });
    this.current = client;
    this.show(STARTING_VIEW);
    try {
      await client.start();
    } catch (error) {
      this.failed(command, error);
      return;
    }
    this.sendUnsentSaves(client);
  }

  /**
   * A start failed. The client library has already shown its error message (naming the command), so this
   * adds none: one cause, one message. The status bar says why; then the settings are read again for a
   * while, since a workbench may still be loading or rewriting settings.json at the first start, and a
   * change it does not announce must not leave the server stopped for good.
   */
  private failed(command: string, error: unknown): void {
    const why = `could not start the language server "${command}": ${errorMessage(error)}. ` +
      "Set k3lsp.server.path or k3lsp.server.python.";
    this.show(stoppedView(why));
    this.log(`k3lsp: ${why}`);
    this.stopRetrying();
    const until = Date.now() + RETRY_FOR_MS;
    this.retry = setInterval(() => {
      if (launchSettings(vscode.workspace.getConfiguration("k3lsp")) !== this.launched) {
        void this.restart();
      } else if (Date.now() > until) {
        this.stopRetrying();
      }
    }, RETRY_MS);
  }

  private stopRetrying(): void {
    if (this.retry !== undefined) {
      clearInterval(this.retry);
      this.retry = undefined;
    }
  }

  private sendUnsentSaves(client: LanguageClient): void {
    const open = new Set(vscode.workspace.textDocuments.map((document) => document.uri.toString()));
    for (const uri of this.unsentSaves) {
      if (open.has(uri)) {
        const textDocument = { uri: client.code2ProtocolConverter.asUri(vscode.Uri.parse(uri)) };
        void client.sendNotification(DidSaveTextDocumentNotification.type, { textDocument });
      }
    }
    this.unsentSaves.clear();
  }

  private show(view: StatusView): void {
    this.item.text = view.text;
    this.item.tooltip = view.tooltip;
    this.item.backgroundColor = view.error ? new vscode.ThemeColor("statusBarItem.errorBackground") : undefined;
  }
}

let session: ClientSession | undefined;

export async function activate(context: vscode.ExtensionContext): Promise<void> {
  const output = vscode.window.createOutputChannel("k3lsp", { log: true });
  const traceLines = vscode.window.createOutputChannel("k3lsp trace");
  const trace = traceChannel(traceLines, () => vscode.workspace.getConfiguration("k3lsp").get("trace.server"));
  const item = vscode.window.createStatusBarItem("k3lsp.status", vscode.StatusBarAlignment.Left, 0);
  item.name = "k3lsp backend";
  item.command = "k3lsp.showStatus";
  item.show();
  const current = new ClientSession(output, trace, item);
  session = current;
  context.subscriptions.push(
    output,
    traceLines,
    trace,
    item,
    vscode.workspace.onDidSaveTextDocument((document) => current.saved(document)),
    ...registerCommands(current),
    vscode.workspace.onDidChangeConfiguration((event) => {
      // The server command and the USER_ONLY settings are fixed per client; the others reach it via synchronize.
      if (event.affectsConfiguration("k3lsp")) {
        current.changed();
      }
    }),
  );
  await current.restart();
}

export async function deactivate(): Promise<void> {
  const current = session;
  session = undefined;
  await current?.stop(); // never rejects
}
