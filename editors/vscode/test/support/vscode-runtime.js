"use strict";
/**
 * The extra VS Code API the real vscode-languageclient touches while it starts, talks to a server
 * and stops (with no documents open): events, disposables, cancellation, diagnostics collections.
 * Added to the recording fake of fakes.js for the test that runs the real client library.
 */

class Disposable {
  constructor(onDispose) {
    this.onDispose = onDispose;
  }
  static from(...disposables) {
    return new Disposable(() => disposables.forEach((d) => d?.dispose?.()));
  }
  dispose() {
    this.onDispose?.();
    this.onDispose = undefined;
  }
}

class EventEmitter {
  constructor() {
    this.listeners = new Set();
    this.event = (listener, thisArg) => {
      const bound = thisArg ? listener.bind(thisArg) : listener;
      this.listeners.add(bound);
      return new Disposable(() => this.listeners.delete(bound));
    };
  }
  fire(value) {
    [...this.listeners].forEach((listener) => listener(value));
  }
  dispose() {
    this.listeners.clear();
  }
}

class CancellationTokenSource {
  constructor() {
    const emitter = new EventEmitter();
    this.emitter = emitter;
    this.token = { isCancellationRequested: false, onCancellationRequested: emitter.event };
  }
  cancel() {
    this.token.isCancellationRequested = true;
    this.emitter.fire();
  }
  dispose() {
    this.emitter.dispose();
  }
}

class CancellationError extends Error {}

/** An event nobody fires: the client subscribes to many editor events a headless test never has. */
function quietEvent() {
  return () => new Disposable();
}

function diagnosticCollection(name) {
  const entries = new Map();
  return {
    name,
    set: (uri, diagnostics) => entries.set(String(uri), diagnostics),
    get: (uri) => entries.get(String(uri)),
    has: (uri) => entries.has(String(uri)),
    delete: (uri) => entries.delete(String(uri)),
    clear: () => entries.clear(),
    forEach: (fn) => entries.forEach((value, key) => fn(key, value)),
    dispose: () => entries.clear(),
  };
}

/** Base classes the client subclasses at load time; never instantiated without documents. */
const DATA_CLASSES = [
  "CallHierarchyItem",
  "CodeAction",
  "CodeLens",
  "CompletionItem",
  "Diagnostic",
  "DocumentLink",
  "InlayHint",
  "SymbolInformation",
  "TypeHierarchyItem",
];

/** Enum members the client reads while building its converters (values only need to be distinct). */
const ENUMS = {
  CodeActionKind: "Empty QuickFix Refactor RefactorExtract RefactorInline RefactorRewrite Source SourceOrganizeImports",
  CodeActionTriggerKind: "Automatic Invoke",
  CompletionItemKind: "Text",
  CompletionItemTag: "Deprecated",
  CompletionTriggerKind: "Invoke TriggerCharacter TriggerForIncompleteCompletions",
  DiagnosticSeverity: "Error Warning Information Hint",
  DiagnosticTag: "Unnecessary Deprecated",
  DocumentHighlightKind: "Text Read Write",
  FileType: "File Directory",
  FoldingRangeKind: "Comment Imports Region",
  InlineCompletionTriggerKind: "Invoke Automatic",
  NotebookCellKind: "Markup Code",
  SignatureHelpTriggerKind: "Invoke TriggerCharacter ContentChange",
  SymbolKind: "Property TypeParameter",
  SymbolTag: "Deprecated",
  TextDocumentSaveReason: "Manual AfterDelay FocusOut",
};

/** Adds the runtime pieces to a fake `vscode` api object (see fakes.js) in place. */
function addRuntime(api) {
  Object.assign(api, {
    version: "1.91.0",
    Disposable,
    EventEmitter,
    CancellationTokenSource,
    CancellationError,
    LogLevel,
    ProgressLocation: { SourceControl: 1, Window: 10, Notification: 15 },
    env: { appName: "Visual Studio Code (fake)", language: "en", openExternal: async () => true },
  });
  for (const [name, members] of Object.entries(ENUMS)) {
    api[name] = Object.fromEntries(members.split(" ").map((member) => [member, `${name}.${member}`]));
  }
  for (const name of DATA_CLASSES) {
    api[name] = class {};
  }
  Object.assign(api.workspace, {
    textDocuments: [],
    notebookDocuments: [],
    onDidOpenTextDocument: quietEvent(),
    onDidChangeTextDocument: quietEvent(),
    onDidCloseTextDocument: quietEvent(),
    onWillSaveTextDocument: quietEvent(),
    onDidChangeWorkspaceFolders: quietEvent(),
    onDidOpenNotebookDocument: quietEvent(),
    onDidChangeNotebookDocument: quietEvent(),
    onDidSaveNotebookDocument: quietEvent(),
    onDidCloseNotebookDocument: quietEvent(),
    onDidCreateFiles: quietEvent(),
    onDidRenameFiles: quietEvent(),
    onDidDeleteFiles: quietEvent(),
    onWillCreateFiles: quietEvent(),
    onWillRenameFiles: quietEvent(),
    onWillDeleteFiles: quietEvent(),
  });
  Object.assign(api.window, {
    visibleTextEditors: [],
    tabGroups: { all: [], onDidChangeTabs: quietEvent(), onDidChangeTabGroups: quietEvent() },
    onDidChangeVisibleTextEditors: quietEvent(),
    onDidChangeActiveTextEditor: quietEvent(),
    withProgress: async (_options, task) => task({ report() {} }, new CancellationTokenSource().token),
  });
  // Providers are registered (hover, code actions, ...) but nothing asks them in these tests.
  api.languages = {
    createDiagnosticCollection: diagnosticCollection,
    match: () => 0,
    registerHoverProvider: () => new Disposable(),
    registerCodeActionsProvider: () => new Disposable(),
  };
}

const LogLevel = { Off: 0, Trace: 1, Debug: 2, Info: 3, Warning: 4, Error: 5 };

module.exports = { addRuntime, EventEmitter, LogLevel };
