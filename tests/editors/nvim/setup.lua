-- Scenario: what setup{} hands to Neovim's LSP client, how it rejects bad options, and which buffers
-- get the server (C sources and *.h headers, which Neovim calls cpp, but not C++ sources).
local report = dofile(vim.fs.dirname(debug.getinfo(1, 'S').source:sub(2)) .. '/report.lua')
local out, wait = report.out, report.wait

local function config()
  local c = vim.lsp.config.k3lsp
  return {
    cmd = c.cmd,
    init_options = c.init_options or vim.NIL,
    settings = c.settings or vim.NIL,
    filetypes = c.filetypes,
    root_markers = c.root_markers,
  }
end

--- Attaching happens in a callback scheduled from the FileType event; `ms` bounds the wait for it (the
--- first file also waits for the server process to start).
local function attached(name, ms)
  vim.cmd.edit(name)
  local buf = vim.api.nvim_get_current_buf()
  vim.wait(ms, function()
    return #vim.lsp.get_clients({ name = 'k3lsp', bufnr = buf, _uninitialized = true }) > 0
  end, 20)
  local clients = vim.lsp.get_clients({ name = 'k3lsp', bufnr = buf, _uninitialized = true })
  return { file = name, filetype = vim.bo[buf].filetype, attached = #clients > 0 }
end

report.run(function()
  local k3lsp = require('k3lsp')
  out('DEFAULT', config())
  local bad = {
    { trigger = 'never' },
    { bogus = true },
    { max_file_bytes = 0 },
    { cmd = { 'k3lsp' }, python = 'python3' },
    { include = '**/*.c' },
    { thinking_effort = 'medium' },
    { endpoint = {} },
  }
  for _, opts in ipairs(bad) do
    local ok, err = pcall(k3lsp.setup, opts)
    out('REJECT', { ok = ok, err = err })
  end
  out('UNCHANGED', config())
  k3lsp.setup({ python = vim.env.K3_TEST_PYTHON })
  out('MINIMAL', config())
  k3lsp.setup({ python = vim.env.K3_TEST_PYTHON, endpoint = { vim.env.K3_TEST_ENDPOINT, 'ipc:///nowhere/k3.sock' } })
  out('LIST', config())

  k3lsp.setup({
    python = vim.env.K3_TEST_PYTHON,
    endpoint = vim.env.K3_TEST_ENDPOINT,
    server_key = '~/keys/server.key',
    client_key = '$K3_TEST_KEYS/client.key_secret',
    trigger = 'manual',
    min_severity = 'high',
    max_file_bytes = 4096,
    include = { 'src/**' },
    exclude = { 'src/vendor/**' },
    thinking_effort = 'high',
  })
  out('FULL', config())
  out('STATUSLINE', k3lsp.statusline())

  out('ATTACH', attached('main.c', 20000))
  out('ATTACH', attached('include/api.h', 20000))
  out('ATTACH', attached('tool.cpp', 500))

  -- The key files of the last setup{} do not exist: the server says so through k3lsp/status (shown in the
  -- status line) and in the audit summary.
  local states, notes = {}, {}
  vim.api.nvim_create_autocmd('User', {
    pattern = 'K3lspStatus',
    callback = function(args)
      table.insert(states, args.data.state)
    end,
  })
  local notify = vim.notify
  vim.notify = function(msg, level, opts)
    table.insert(notes, msg)
    return notify(msg, level, opts)
  end
  vim.cmd.edit('main.c')
  wait('initialized', 30000, function()
    return #vim.lsp.get_clients({ name = 'k3lsp', bufnr = 0 }) > 0
  end)
  vim.cmd('K3Audit')
  wait('refused', 60000, function()
    return #notes > 0 and not vim.list_contains({ '', 'k3: connecting' }, k3lsp.statusline())
  end)
  out('REFUSED', { statusline = k3lsp.statusline(), states = states, note = notes[1] or vim.NIL })
end)
