"use strict";
/**
 * Recording fakes of `vscode` and `vscode-languageclient/node`, installed through Module._load.
 *
 * VS Code cannot be downloaded here, so activation is tested against these fakes. They mimic the
 * behaviour the extension depends on, including VS Code's refusal to register a command id twice.
 */
const Module = require("node:module");
const path = require("node:path");
const { addRuntime, EventEmitter, LogLevel } = require("./vscode-runtime");

const OUT = path.resolve(__dirname, "..", "..", "out");

class Uri {
  constructor(scheme, fsPath) {
    this.scheme = scheme;
    this.path = fsPath;
  }
  static file(fsPath) {
    return new Uri("file", fsPath);
  }
  static parse(text) {
    const match = /^([a-z][a-z0-9+.-]*):\/\/(.*)$/i.exec(text);
    if (!match) {
      throw new Error(`not a uri: ${text}`);
    }
    return new Uri(match[1], match[2]);
  }
  toString() {
    return `${this.scheme}://${this.path}`;
  }
}

class ThemeColor {
  constructor(id) {
    this.id = id;
  }
}

function disposable(fn = () => {}) {
  return { dispose: fn };
}

/** Setting ids (without "k3lsp.") -> the defaults package.json contributes, as VS Code reports them. */
function contributedDefaults() {
  const manifest = require(path.join(__dirname, "..", "..", "package.json"));
  const props = manifest.contributes.configuration.properties;
  return Object.fromEntries(Object.entries(props).map(([id, spec]) => [id.replace(/^k3lsp\./, ""), spec.default]));
}

/**
 * What an untouched settings page sends the server: package.json's defaults that are not blank (the server's own
 * defaults, generated from its schema), as config.ts's serverSettings picks them.
 */
function defaultsSent() {
  const config = require(path.join(OUT, "config.js"));
  const defaults = contributedDefaults();
  return config.serverSettings({ get: (key) => defaults[key], inspect: (key) => ({ defaultValue: defaults[key] }) });
}

/**
 * `workspace.getConfiguration(section).get(key)` over the `k3lsp` settings: a full id gives its value,
 * a prefix gives the nested object (getConfiguration().get("k3lsp") is the whole section). `user` are the user
 * settings over the defaults, `workspace` the workspace's: `get` merges them (the workspace wins, as in VS Code),
 * `inspect` tells them apart.
 */
function configurationView(user, section, workspace = {}) {
  const prefix = section ? `${section}.` : "";
  const settings = { ...user, ...workspace };
  const defaults = contributedDefaults();
  return {
    inspect(key) {
      const id = `${prefix}${key}`.replace(/^k3lsp\./, "");
      if (!(id in defaults)) {
        return undefined;
      }
      return { key: `k3lsp.${id}`, defaultValue: defaults[id], globalValue: user[id], workspaceValue: workspace[id] };
    },
    get(key) {
      const id = `${prefix}${key}`;
      if (id.startsWith("k3lsp.") && id.slice(6) in settings) {
        return settings[id.slice(6)];
      }
      const nested = {};
      let found = false;
      for (const [name, value] of Object.entries(settings)) {
        const full = `k3lsp.${name}`;
        if (full.startsWith(`${id}.`)) {
          const parts = full.slice(id.length + 1).split(".");
          let node = nested;
          parts.slice(0, -1).forEach((part) => (node = node[part] ??= {}));
          node[parts.at(-1)] = value;
          found = true;
        }
      }
      return found ? nested : undefined;
    },
  };
}

/**
 * A fresh fake VS Code. `settings` is the flat `k3lsp` section, e.g. {"server.path": "x"}, over
 * the defaults of package.json.
 */
function makeVscode(settings) {
  const world = {
    settings: { ...contributedDefaults(), ...settings },
    workspaceSettings: {}, // what the opened folder's .vscode/settings.json says
    commands: new Map(),
    executed: [],
    messages: [],
    choices: [],
    configListeners: [],
    statusMessages: [],
    statusItems: [],
    channels: [],
    saveListeners: [],
  };
  const message = (level) => (text, ...items) => {
    world.messages.push({ level, text, items });
    return Promise.resolve(world.choices.shift());
  };
  world.api = {
    Uri,
    ThemeColor,
    EventEmitter,
    LogLevel,
    StatusBarAlignment: { Left: 1, Right: 2 },
    workspace: {
      getConfiguration(section) {
        return configurationView({ ...world.settings }, section, { ...world.workspaceSettings });
      },
      workspaceFolders: [{ uri: Uri.file("/w"), name: "w", index: 0 }],
      textDocuments: [],
      onDidSaveTextDocument(listener, thisArg) {
        world.saveListeners.push(thisArg ? listener.bind(thisArg) : listener);
        return disposable();
      },
      onDidChangeConfiguration(listener) {
        world.configListeners.push(listener);
        return disposable();
      },
    },
    window: {
      activeTextEditor: undefined,
      setStatusBarMessage(text, timeout) {
        world.statusMessages.push({ text, timeout });
        return disposable();
      },
      showErrorMessage: message("error"),
      showWarningMessage: message("warning"),
      showInformationMessage: message("info"),
      createOutputChannel(name, options) {
        const channel = { name, options, lines: [], shown: 0, disposed: false, logLevel: 3 };
        // Like VS Code, a disposed channel refuses to be written to.
        const write = (line) => {
          if (channel.disposed) {
            throw new Error("Channel has been closed");
          }
          channel.lines.push(line);
        };
        channel.appendLine = write;
        // The LogOutputChannel methods the language client logs through.
        for (const level of ["trace", "debug", "info", "warn", "error", "append"]) {
          channel[level] = (line) => write(`[${level}] ${line}`);
        }
        channel.onDidChangeLogLevel = () => disposable();
        channel.clear = () => (channel.lines.length = 0);
        channel.replace = (value) => (channel.lines = [value]);
        channel.show = () => (channel.shown += 1);
        channel.hide = () => undefined;
        channel.dispose = () => (channel.disposed = true);
        world.channels.push(channel);
        return channel;
      },
      createStatusBarItem(id, alignment, priority) {
        const item = { id, alignment, priority, text: "", tooltip: "", visible: false };
        item.show = () => (item.visible = true);
        item.dispose = () => (item.visible = false);
        world.statusItems.push(item);
        return item;
      },
    },
    commands: {
      registerCommand(id, handler) {
        if (world.commands.has(id)) {
          throw new Error(`command '${id}' already exists`);
        }
        world.commands.set(id, handler);
        return disposable(() => world.commands.delete(id));
      },
      async executeCommand(id, ...args) {
        world.executed.push({ id, args });
        const handler = world.commands.get(id);
        return handler ? handler(...args) : undefined;
      },
    },
  };
  /** Saves an open document (fires onDidSaveTextDocument). */
  world.save = (document) => world.saveListeners.forEach((listener) => listener(document));
  /** Fires onDidChangeConfiguration for the given changed setting ids. */
  world.changeSettings = (changes, scope = world.settings) => {
    Object.assign(scope, changes);
    const changed = Object.keys(changes).map((key) => `k3lsp.${key}`);
    const event = {
      affectsConfiguration: (section) => changed.some((id) => id === section || id.startsWith(`${section}.`)),
    };
    world.configListeners.forEach((listener) => listener(event));
  };
  return world;
}

const State = { Stopped: 1, Running: 2, Starting: 3 };
const EXECUTE_COMMAND = "workspace/executeCommand";

/** A fresh fake vscode-languageclient whose clients record what the extension does with them. */
function makeLanguageClientModule(vscodeWorld) {
  const lc = { clients: [], startError: undefined, responses: new Map() };

  /** Like the real ExecuteCommandFeature: registers each advertised server command as a VS Code command. */
  class FakeExecuteCommandFeature {
    constructor(client) {
      this.client = client;
    }
    register(data) {
      for (const command of data.registerOptions.commands) {
        vscodeWorld.api.commands.registerCommand(command, (...args) =>
          this.client.sendRequest({ method: EXECUTE_COMMAND }, { command, arguments: args }),
        );
      }
    }
  }

  class LanguageClient {
    constructor(id, name, serverOptions, clientOptions) {
      Object.assign(this, { id, name, serverOptions, clientOptions });
      this.state = State.Stopped;
      this.started = 0;
      this.disposed = 0;
      this.requests = [];
      this.notifications = [];
      this.features = [];
      this.notificationHandlers = new Map();
      this.stateListeners = [];
      this.executeCommandFeature = new FakeExecuteCommandFeature(this);
      lc.clients.push(this);
    }
    setState(newState) {
      const oldState = this.state;
      this.state = newState;
      this.stateListeners.forEach((listener) => listener({ oldState, newState }));
    }
    async start() {
      this.started += 1;
      this.setState(State.Starting);
      if (lc.startError) {
        this.setState(State.Stopped);
        throw lc.startError;
      }
      this.setState(State.Running);
    }
    async dispose() {
      this.disposed += 1;
      this.setState(State.Stopped);
    }
    isRunning() {
      return this.state === State.Running;
    }
    needsStop() {
      return this.state === State.Starting || this.state === State.Running;
    }
    get code2ProtocolConverter() {
      return { asUri: (uri) => uri.toString() };
    }
    async sendNotification(type, params) {
      this.notifications.push({ method: type.method, params });
    }
    registerFeature(feature) {
      this.features.push(feature);
    }
    getFeature(method) {
      if (method !== EXECUTE_COMMAND) {
        throw new Error(`unexpected feature ${method}`);
      }
      return this.executeCommandFeature;
    }
    onNotification(method, handler) {
      this.notificationHandlers.set(method, handler);
      return disposable();
    }
    onDidChangeState(listener) {
      this.stateListeners.push(listener);
      return disposable();
    }
    async sendRequest(type, params) {
      this.requests.push({ method: type.method, params });
      const response = lc.responses.get(params.command);
      if (response instanceof Error) {
        throw response;
      }
      return response;
    }
    /** Simulates the server sending a notification. */
    notify(method, params) {
      const handler = this.notificationHandlers.get(method);
      if (!handler) {
        throw new Error(`no handler for ${method}`);
      }
      handler(params);
    }
  }

  lc.api = {
    LanguageClient,
    State,
    ExecuteCommandRequest: { method: EXECUTE_COMMAND, type: { method: EXECUTE_COMMAND } },
    DidSaveTextDocumentNotification: { method: "textDocument/didSave", type: { method: "textDocument/didSave" } },
  };
  return lc;
}

let current;
const originalLoad = Module._load;
Module._load = function load(request, parent, isMain) {
  if (current && request === "vscode") {
    return current.vscode.api;
  }
  if (current?.lc && request === "vscode-languageclient/node") {
    return current.lc.api;
  }
  return originalLoad.call(this, request, parent, isMain);
};

const LANGUAGE_CLIENT = path.resolve(__dirname, "..", "..", "node_modules", "vscode-languageclient") + path.sep;

const DIST = path.resolve(__dirname, "..", "..", "dist");

/**
 * Fresh fakes plus a freshly loaded copy of the extension (module state such as the current
 * session must not leak between tests). `client`:
 * - "fake": out/ (tsc) with the recording fake of vscode-languageclient (`lc`);
 * - "real": out/ with the real vscode-languageclient, loaded fresh so it binds to this fake `vscode`;
 * - "bundle": dist/extension.js, the esbuild bundle that ships in the .vsix (the real client inside).
 */
function loadExtension(settings = {}, { client = "fake" } = {}) {
  const vscode = makeVscode(settings);
  const lc = client === "fake" ? makeLanguageClientModule(vscode) : undefined;
  if (client !== "fake") {
    addRuntime(vscode.api);
  }
  current = { vscode, lc };
  for (const key of Object.keys(require.cache)) {
    if ([OUT, DIST, LANGUAGE_CLIENT].some((dir) => key.startsWith(dir.endsWith(path.sep) ? dir : dir + path.sep))) {
      delete require.cache[key];
    }
  }
  const extension = require(path.join(client === "bundle" ? DIST : OUT, "extension.js"));
  const context = { subscriptions: [] };
  return { extension, context, vscode, lc };
}

module.exports = { loadExtension, defaultsSent, Uri, State, OUT };
