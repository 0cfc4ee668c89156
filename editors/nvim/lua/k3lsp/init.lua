--- k3lsp for Neovim: security findings from the k3 audit model on C files, through the `k3lsp` server.
---
--- `require('k3lsp').setup{...}` validates the options once, turns them into the server's keys (the
--- same camelCase keys the VS Code extension sends) and registers the client: `vim.lsp.config` +
--- `vim.lsp.enable` on 0.11+, a FileType autocmd around `vim.lsp.start` on 0.10. Nothing happens
--- before `setup` is called, so installing the plugin never starts a process by itself.
local M = {}

M.name = 'k3lsp'

--- The server's settings (generated from k3lsp/core/options.py: `python -m k3lsp.core.schema`): each setup{}
--- option, its camelCase server key (what the VS Code extension sends too), its kind and allowed values. The
--- server reads them from initializationOptions and from the workspace/configuration section `k3lsp`. Options
--- left nil are not sent: the server's default applies (e.g. the endpoint from K3LSP_ENDPOINT).
local SETTINGS = require('k3lsp.settings')

M.defaults = {
  cmd = nil, -- list: the server command line, e.g. { '/path/to/venv/bin/k3lsp' }
  python = nil, -- string: run `python -I -m k3lsp.cli` with this interpreter instead of `cmd`
  -- every server option (SETTINGS) is nil: the server's default
  filetypes = { 'c', 'cpp' }, -- cpp only for `*.h`: Neovim calls headers cpp unless g:c_syntax_for_h is set
  root_markers = { '.git', 'compile_commands.json', '.k3audit-baseline.json' },
  lsp = {}, -- extra fields for the client config: on_attach, capabilities, handlers, ...
}

local OPTION_NAMES = { 'cmd', 'python', 'filetypes', 'root_markers', 'lsp' }
for _, setting in ipairs(SETTINGS) do
  table.insert(OPTION_NAMES, setting.option)
end

--- The resolved options of the last `setup` (nil before): `:checkhealth k3lsp` reads them.
M.options = nil

--- Last `k3lsp/status` per client id: { state, queued, running, message }.
M.states = {}

local function fail(msg)
  error('k3lsp.setup: ' .. msg, 0)
end

local function is_strings(value)
  local ok = type(value) == 'table' and vim.islist(value)
  for _, item in ipairs(ok and value or {}) do
    ok = ok and type(item) == 'string' and item ~= ''
  end
  return ok
end

local function is_integer(value, least)
  return type(value) == 'number' and value >= least and value == math.floor(value)
end

--- What each kind of the schema accepts, and how to say so. `names` (witnesses) checks only the type: an
--- unknown name is the server's to leave out and name, so the other names still apply.
local KINDS = {
  endpoints = { 'a string or a non-empty list of strings', function(v)
    return type(v) == 'string' or (is_strings(v) and #v > 0)
  end },
  text = { 'a string', function(v)
    return type(v) == 'string'
  end },
  flag = { 'a boolean', function(v)
    return type(v) == 'boolean'
  end },
  size = { 'a positive integer', function(v)
    return is_integer(v, 1)
  end },
  count = { '0 or a positive integer', function(v)
    return is_integer(v, 0)
  end },
  globs = { 'a list of non-empty strings', is_strings },
  names = { 'a list of non-empty strings', is_strings },
  macros = { 'a table of lists (loops, attributes, statements)', function(v)
    return type(v) == 'table' and (next(v) == nil or not vim.islist(v))
  end },
}

--- The problem with one server option, or nil.
local function check_setting(setting, value)
  if setting.kind == 'choice' then
    if not vim.tbl_contains(setting.choices, value) then
      return ('%s must be one of %s, got %s'):format(setting.option, table.concat(setting.choices, ', '), vim.inspect(value))
    end
    return nil
  end
  local expected, ok = KINDS[setting.kind][1], KINDS[setting.kind][2]
  if not ok(value) then
    return ('%s must be %s, got %s'):format(setting.option, expected, vim.inspect(value))
  end
end

--- Every user mistake, in one error naming each wrong option once, raised from `setup`, not a broken client later.
local function validate(opts)
  local problems = {}
  local function check(ok, problem)
    if not ok then
      table.insert(problems, problem)
    end
  end
  for key in pairs(opts) do
    check(vim.tbl_contains(OPTION_NAMES, key), ('unknown option %s'):format(vim.inspect(key)))
  end
  for _, setting in ipairs(SETTINGS) do
    if opts[setting.option] ~= nil then
      local problem = check_setting(setting, opts[setting.option])
      check(problem == nil, problem)
    end
  end
  check(opts.python == nil or type(opts.python) == 'string', 'python must be a string')
  check(opts.lsp == nil or type(opts.lsp) == 'table', 'lsp must be a table')
  for _, key in ipairs({ 'cmd', 'filetypes', 'root_markers' }) do
    check(opts[key] == nil or is_strings(opts[key]), key .. ' must be a list of non-empty strings')
  end
  check(not (opts.cmd and opts.python), 'set cmd or python, not both')
  check(not (opts.cmd and #opts.cmd == 0), 'cmd must not be empty')
  if #problems > 0 then
    fail(table.concat(problems, '; '))
  end
end

--- The server command line: `cmd`, else `python -I -m k3lsp.cli`, else `k3lsp` from PATH.
--- `-I`: the server starts in the project, and a plain `-m` would import a `k3lsp/` directory lying there
--- (the audited repository's code) before the installed package.
function M.server_cmd(opts)
  if opts.cmd then
    return vim.deepcopy(opts.cmd)
  end
  if opts.python then
    return { vim.fs.normalize(opts.python), '-I', '-m', 'k3lsp.cli' }
  end
  return { 'k3lsp' }
end

--- The server keys that are set. Key paths get `~` and `$VARS` expanded: the server sees them verbatim.
--- An empty kernel_macros table goes as the JSON object `{}`, not the list `[]` an empty Lua table makes.
function M.server_settings(opts)
  local settings = {}
  for _, setting in ipairs(SETTINGS) do
    local value = opts[setting.option]
    if value ~= nil then
      if setting.option == 'server_key' or setting.option == 'client_key' then
        value = vim.fs.normalize(value)
      elseif setting.kind == 'macros' and next(value) == nil then
        value = vim.empty_dict()
      end
      settings[setting.key] = value
    end
  end
  return settings
end

--- The endpoints configured for the server, as a list, for messages and the health check; nil means the
--- server's default: the private ipc socket of this user's daemon (see `k3lsp status --help`).
function M.endpoints(opts)
  opts = opts or M.options or {}
  local configured = opts.endpoint or vim.env.K3LSP_ENDPOINT
  if type(configured) == 'string' then
    return { configured }
  end
  return configured
end

--- C sources always; other filetypes (cpp, from `filetypes`) only for `*.h` headers.
local function wants(bufnr)
  if vim.bo[bufnr].filetype == 'c' then
    return true
  end
  return vim.api.nvim_buf_get_name(bufnr):match('%.h$') ~= nil
end

--- Status line text for the params of a `k3lsp/status` notification (the same words as VS Code's).
local function status_text(status)
  local pending = (status.running or 0) + (status.queued or 0)
  if status.state == 'connected' then
    return pending > 0 and ('k3: auditing ' .. pending) or 'k3: idle'
  elseif status.state == 'disconnected' then
    return 'k3: not connected'
  elseif status.state == 'connecting' then
    return 'k3: connecting'
  elseif status.state == 'loading' then
    local pct = tonumber(status.percent)
    return pct and string.format('k3: backend loading (%d %%)', pct) or 'k3: backend loading'
  elseif status.state == 'down' then
    return 'k3: backend unreachable'
  elseif status.state == 'unauthorized' then
    return 'k3: key refused'
  end
  return 'k3: ' .. tostring(status.state)
end

--- For 'statusline' / lualine: the state of the k3lsp client of the current buffer (or of any).
function M.statusline()
  local clients = vim.lsp.get_clients({ name = M.name, bufnr = 0 })
  if #clients == 0 then
    clients = vim.lsp.get_clients({ name = M.name })
  end
  for _, client in ipairs(clients) do
    local status = M.states[client.id]
    if status then
      return status_text(status)
    end
  end
  return ''
end

--- `k3lsp/status` notification: remember it, tell `User K3lspStatus` autocmds, redraw status lines.
local function on_status(_, params, ctx)
  if type(params) ~= 'table' then
    return
  end
  M.states[ctx.client_id] = params
  vim.api.nvim_exec_autocmds('User', { pattern = 'K3lspStatus', data = params, modeline = false })
  pcall(vim.cmd.redrawstatus)
end

--- Hovers in plain text: Neovim's float shows Markdown's source, where the escapes that keep model text from
--- forming links (every punctuation character) would show as backslashes, and a concealed link hides its target.
local CAPABILITIES = { textDocument = { hover = { contentFormat = { 'plaintext', 'markdown' } } } }


--- The client config shared by the 0.11 and 0.10 paths.
--- With no server keys set, nothing is sent (an empty Lua table would go out as the JSON list `[]`):
--- the server then uses its defaults. `settings` (the answer to workspace/configuration) leaves out the
--- connection keys, which the server takes from `init_options` alone.
function M.client_config(opts)
  local settings = M.server_settings(opts)
  local has_settings = next(settings) ~= nil
  local section = vim.deepcopy(settings)
  for _, setting in ipairs(SETTINGS) do
    if setting.connection then -- read from initializationOptions only (k3lsp/core/options.py: CONNECTION)
      section[setting.key] = nil
    end
  end
  local defaults = { handlers = { ['k3lsp/status'] = on_status }, capabilities = CAPABILITIES }
  return vim.tbl_deep_extend('force', defaults, opts.lsp or {}, {
    name = M.name,
    cmd = M.server_cmd(opts),
    filetypes = opts.filetypes,
    root_markers = opts.root_markers,
    init_options = has_settings and settings or nil,
    settings = next(section) ~= nil and { k3lsp = section } or nil,
  })
end

--- The Neovim 0.11 config (`vim.lsp.config`): the client config, attached to C buffers and to `*.h` ones.
--- `lsp/k3lsp.lua` returns it for the defaults, so `vim.lsp.enable('k3lsp')` works without setup{}.
function M.lsp_config(opts)
  local config = M.client_config(opts)
  config.root_dir = function(bufnr, on_dir)
    if wants(bufnr) then
      on_dir(vim.fs.root(bufnr, opts.root_markers))
    end
  end
  return config
end

local function request(client, method, params, handler, bufnr)
  if vim.fn.has('nvim-0.11') == 1 then
    return client:request(method, params, handler, bufnr)
  end
  return client.request(method, params, handler, bufnr)
end

local function notify(msg, level)
  vim.notify('k3lsp: ' .. msg, level or vim.log.levels.INFO)
end

--- The k3lsp client of `bufnr`, else any k3lsp client (workspace commands work from any buffer).
local function find_client(bufnr, any)
  local clients = vim.lsp.get_clients({ name = M.name, bufnr = bufnr })
  if #clients == 0 and any then
    clients = vim.lsp.get_clients({ name = M.name })
  end
  return clients[1]
end

--- `workspace/executeCommand`; `on_result(result)` runs on success, errors are reported here.
function M.execute(command, arguments, on_result, bufnr)
  bufnr = bufnr or vim.api.nvim_get_current_buf()
  local client = find_client(bufnr, command ~= 'k3lsp.auditFile')
  if not client then
    notify('no k3lsp server is attached to this buffer (a C file in a project, after setup{})', vim.log.levels.ERROR)
    return false
  end
  request(client, 'workspace/executeCommand', { command = command, arguments = arguments }, function(err, result)
    if err then
      notify(('%s failed: %s'):format(command, err.message or vim.inspect(err)), vim.log.levels.ERROR)
    elseif on_result then
      on_result(result)
    end
  end, bufnr)
  return true
end

local function inline(value)
  return type(value) == 'table' and vim.inspect(value, { newline = ' ', indent = '' }) or tostring(value)
end

--- The `k3lsp.status` result as `key: value` lines, nested maps one level deeper (sorted, for reading).
local function format_status(result, indent)
  indent = indent or '  '
  if type(result) ~= 'table' or vim.islist(result) then
    return indent .. inline(result)
  end
  local lines = {}
  local keys = vim.tbl_keys(result)
  table.sort(keys, function(a, b)
    return tostring(a) < tostring(b)
  end)
  for _, key in ipairs(keys) do
    local value = result[key]
    if type(value) == 'table' and not vim.islist(value) and #indent == 2 then
      table.insert(lines, ('%s%s:'):format(indent, key))
      table.insert(lines, format_status(value, indent .. '  '))
    else
      table.insert(lines, ('%s%s: %s'):format(indent, key, inline(value)))
    end
  end
  return table.concat(lines, '\n')
end

--- The summary an audit command returns (`{units, findings, error}` or `{files, error}`) as one message.
local function report_audit(what, result)
  if type(result) ~= 'table' then
    notify('audited ' .. what)
  elseif type(result.error) == 'string' then
    notify(('audit of %s stopped: %s'):format(what, result.error), vim.log.levels.WARN)
  elseif result.cancelled == true then
    notify(('audit of %s was superseded by a newer one'):format(what))
  else
    local counts = {}
    for _, key in ipairs({ 'files', 'units', 'findings' }) do
      if type(result[key]) == 'number' then
        table.insert(counts, ('%d %s'):format(result[key], key))
      end
    end
    notify(('audited %s%s'):format(what, #counts > 0 and (': ' .. table.concat(counts, ', ')) or ''))
  end
end

--- The :K3Audit, :K3AuditWorkspace and :K3Status commands (setup{} and lsp/k3lsp.lua create them).
function M.create_commands()
  vim.api.nvim_create_user_command('K3Audit', function()
    local bufnr = vim.api.nvim_get_current_buf()
    local name = vim.fn.fnamemodify(vim.api.nvim_buf_get_name(bufnr), ':~:.')
    M.execute('k3lsp.auditFile', { vim.uri_from_bufnr(bufnr) }, function(result)
      report_audit(name, result)
    end, bufnr)
  end, { desc = 'k3lsp: audit the current C file' })
  vim.api.nvim_create_user_command('K3AuditWorkspace', function()
    M.execute('k3lsp.auditWorkspace', {}, function(result)
      report_audit('the workspace', result)
    end)
  end, { desc = 'k3lsp: audit every C file of the workspace (background priority)' })
  vim.api.nvim_create_user_command('K3Status', function()
    M.execute('k3lsp.status', {}, function(result)
      notify('backend status:\n' .. format_status(result))
    end)
  end, { desc = 'k3lsp: show the audit backend status' })
end

--- Neovim 0.10: start (or reuse) the client from a FileType autocmd, and for C buffers already open
--- (setup{} may run late, e.g. when a plugin manager loads the plugin on the FileType event).
local function enable_legacy(config)
  local function start(bufnr)
    if vim.bo[bufnr].buftype ~= '' or not vim.tbl_contains(config.filetypes, vim.bo[bufnr].filetype) then
      return
    end
    if wants(bufnr) then
      local start_config = vim.deepcopy(config)
      start_config.root_dir = vim.fs.root(bufnr, config.root_markers)
      vim.lsp.start(start_config, { bufnr = bufnr })
    end
  end
  local group = vim.api.nvim_create_augroup('k3lsp', { clear = true })
  vim.api.nvim_create_autocmd('FileType', {
    group = group,
    pattern = config.filetypes,
    callback = function(args)
      start(args.buf)
    end,
  })
  for _, bufnr in ipairs(vim.api.nvim_list_bufs()) do
    if vim.api.nvim_buf_is_loaded(bufnr) then
      start(bufnr)
    end
  end
end

function M.setup(user)
  user = user or {}
  if type(user) ~= 'table' then
    fail('expected a table of options, got ' .. vim.inspect(user))
  end
  if vim.fn.has('nvim-0.10') == 0 then
    notify('needs Neovim 0.10 or newer (0.11+ recommended)', vim.log.levels.ERROR)
    return
  end
  validate(user)
  local opts = vim.tbl_extend('force', vim.deepcopy(M.defaults), user)
  M.create_commands()
  if vim.fn.has('nvim-0.11') == 1 then
    local config = M.lsp_config(opts)
    if M.options then
      -- A second setup{} replaces the first instead of merging into it (stale keys would stay).
      vim.lsp.config[M.name] = config
    else
      vim.lsp.config(M.name, config) -- merges into what the user set with vim.lsp.config('k3lsp', ...)
    end
    vim.lsp.enable(M.name)
  else
    enable_legacy(M.client_config(opts))
  end
  M.options = opts
end

return M
