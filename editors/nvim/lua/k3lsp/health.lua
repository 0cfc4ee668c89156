--- `:checkhealth k3lsp`: the questions asked when no finding shows up. Is Neovim new enough, does the
--- server start, is the audit backend reachable with these options, can the key files be read?
--- The backend is asked through the server's own `k3lsp status` command, so the check uses the same
--- client code (endpoint default, keys, timeouts) as the language server.
local M = {}

local SERVER_TIMEOUT_MS = 10000 -- `--help` imports the CLI; a cold Python start can take a few seconds
local STATUS_TIMEOUT_S = 3 -- `k3lsp status --timeout`: a daemon that is up answers in milliseconds

--- Runs `cmd` to completion (bounded); returns rc (nil if it could not start or timed out) and output.
local function run(cmd, timeout_ms)
  local ok, proc = pcall(vim.system, cmd, { text = true, timeout = timeout_ms })
  if not ok then
    return nil, tostring(proc)
  end
  local result = proc:wait()
  local output = vim.trim((result.stderr or '') .. '\n' .. (result.stdout or ''))
  if result.code == 124 then
    return nil, ('no answer within %d ms, stopped'):format(timeout_ms)
  end
  return result.code, output, result.stdout
end

--- The last line says why (argparse errors, DaemonError messages, a traceback's exception).
local function last_line(text)
  local lines = vim.split(vim.trim(text), '\n')
  return lines[#lines] or ''
end

local function check_nvim()
  local v = vim.version()
  local text = ('Neovim %d.%d.%d'):format(v.major, v.minor, v.patch)
  if vim.fn.has('nvim-0.11') == 1 then
    vim.health.ok(text .. ' (vim.lsp.config / vim.lsp.enable)')
  elseif vim.fn.has('nvim-0.10') == 1 then
    vim.health.warn(text .. ': works through vim.lsp.start; 0.11+ is recommended')
  else
    vim.health.error(text .. ': k3lsp needs Neovim 0.10 or newer')
  end
end

--- Returns true when the server command exists and answers `--help`.
local function check_server(cmd)
  local exe = cmd[1]
  if vim.fn.executable(exe) == 0 then
    vim.health.error(('server command not found: %s'):format(exe), {
      'install the k3lsp Python package (it provides the `k3lsp` command)',
      "or set `cmd = { '/path/to/k3lsp' }` or `python = '/path/to/venv/bin/python'` in setup{}",
    })
    return false
  end
  local rc, output = run(vim.list_extend(vim.deepcopy(cmd), { '--help' }), SERVER_TIMEOUT_MS)
  if rc ~= 0 then
    vim.health.error(('`%s --help` failed: %s'):format(table.concat(cmd, ' '), last_line(output)))
    return false
  end
  vim.health.ok(('server runs: %s'):format(table.concat(cmd, ' ')))
  return true
end

--- Returns false when the file cannot be read (the backend check would fail for that reason).
local function check_key(label, path, secret)
  local full = vim.fs.normalize(path)
  if vim.fn.filereadable(full) == 0 then
    vim.health.error(('%s %s is not a readable file'):format(label, full))
    return false
  end
  local stat = vim.uv.fs_stat(full)
  if secret and stat and bit.band(stat.mode, tonumber('077', 8)) ~= 0 then
    vim.health.warn(('%s %s is readable by other users'):format(label, full), { 'chmod 600 ' .. full })
  else
    vim.health.ok(('%s %s is readable'):format(label, full))
  end
  return true
end

--- Returns false when a configured key file cannot be read.
local function check_keys(opts)
  if not opts.server_key and not opts.client_key then
    vim.health.info('no server_key / client_key: no encryption (fine for the daemon of this user on this machine)')
    return true
  end
  if not (opts.server_key and opts.client_key) then
    vim.health.warn('CurveZMQ needs both server_key (the daemon public key) and client_key (your secret key)')
  end
  local ok = true
  if opts.server_key then
    ok = check_key('server_key', opts.server_key, false) and ok
  end
  if opts.client_key then
    ok = check_key('client_key', opts.client_key, true) and ok
  end
  return ok
end

--- One line about the model from `k3lsp status --json` (`{welcome = {...}, status = {...}}`, or a list of
--- them for several endpoints: the first one's).
local function describe(stdout)
  local ok, decoded = pcall(vim.json.decode, stdout)
  if ok and type(decoded) == 'table' and vim.islist(decoded) then
    decoded = decoded[1]
  end
  if not ok or type(decoded) ~= 'table' or type(decoded.welcome) ~= 'table' then
    return 'answered'
  end
  local w = decoded.welcome
  return ('model %s, %s experts, %s rank(s)'):format(tostring(w.model), tostring(w.experts), tostring(w.ranks))
end

local function check_backend(k3lsp, cmd, opts)
  local configured = k3lsp.endpoints(opts)
  local endpoint = configured and table.concat(configured, ', ') or "the daemon's default socket"
  local status = vim.list_extend(vim.deepcopy(cmd), { 'status', '--json', '--timeout', tostring(STATUS_TIMEOUT_S) })
  for _, each in ipairs(configured or {}) do
    vim.list_extend(status, { '--endpoint', each })
  end
  if opts.insecure then
    table.insert(status, '--insecure')
  end
  if opts.server_key then
    vim.list_extend(status, { '--server-key', vim.fs.normalize(opts.server_key) })
  end
  if opts.client_key then
    vim.list_extend(status, { '--client-key', vim.fs.normalize(opts.client_key) })
  end
  local rc, output, stdout = run(status, SERVER_TIMEOUT_MS + STATUS_TIMEOUT_S * 1000)
  if rc == 0 then
    vim.health.ok(('backend reachable at %s: %s'):format(endpoint, describe(stdout)))
  else
    vim.health.error(('backend not reachable at %s: %s'):format(endpoint, last_line(output)), {
      'start it: k3-backend serve --model PATH' .. (configured and (' --bind ' .. configured[1]) or ''),
      'or point `endpoint` in setup{} (or $K3LSP_ENDPOINT) at the running daemon',
    })
  end
end

local function check_clients(k3lsp)
  local clients = vim.lsp.get_clients({ name = k3lsp.name })
  if #clients == 0 then
    vim.health.info('no k3lsp client running (it starts on the first C file of a project)')
  end
  for _, client in ipairs(clients) do
    local state = k3lsp.states[client.id]
    vim.health.info(('client %d (root %s): %s'):format(client.id, tostring(client.root_dir),
      state and (state.state .. (state.message and (': ' .. state.message) or '')) or 'no status yet'))
  end
end

--- Which static analyzers (the `witnesses` setting) the server finds: `k3lsp witnesses --json`.
local function check_witnesses(cmd, opts)
  local rc, output, stdout = run(vim.list_extend(vim.deepcopy(cmd), { 'witnesses', '--json' }), SERVER_TIMEOUT_MS)
  local ok, found = pcall(vim.json.decode, stdout or '')
  if rc ~= 0 or not ok or type(found) ~= 'table' then
    vim.health.warn('cannot list the witnesses: ' .. last_line(output or ''))
    return
  end
  local wanted = {}
  for _, name in ipairs(opts.witnesses or {}) do
    wanted[name] = true
  end
  for name, state in pairs(found) do
    if not state:match('^not found') then
      vim.health.ok(('witness %s: %s%s'):format(name, state, wanted[name] and '' or ' (not in the witnesses setting)'))
    elseif wanted[name] then
      vim.health.warn(('witness %s is in the witnesses setting but %s'):format(name, state))
    else
      vim.health.info(('witness %s: %s'):format(name, state))
    end
  end
end

function M.check()
  local k3lsp = require('k3lsp')
  vim.health.start('k3lsp')
  check_nvim()
  local opts = k3lsp.options
  if opts then
    vim.health.ok('setup{} was called')
  else
    vim.health.warn("setup{} was not called: nothing starts the server", { "require('k3lsp').setup{}" })
    opts = k3lsp.defaults
  end
  local cmd = k3lsp.server_cmd(opts)
  local keys_ok = check_keys(opts)
  if not check_server(cmd) then
    vim.health.info('backend not checked: it is asked through the server command')
  elseif not keys_ok then
    vim.health.info('backend not checked: fix the key files first')
  else
    check_backend(k3lsp, cmd, opts)
  end
  if vim.fn.executable(cmd[1]) == 1 then
    check_witnesses(cmd, opts)
  end
  check_clients(k3lsp)
end

return M
