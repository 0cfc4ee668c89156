-- Scenario: every server option set in setup{} at once reaches the server (the `settings` of its k3lsp.status);
-- setup{} with several wrong options raises one error naming each; a value only the server can judge (an unknown
-- witness) gives one LSP message naming it, and the other settings apply.
local report = dofile(vim.fs.dirname(debug.getinfo(1, 'S').source:sub(2)) .. '/report.lua')
local out, wait = report.out, report.wait

--- The client of main.c once initialized, after setup(opts) (nil on timeout).
local function started(opts, messages)
  vim.cmd('silent! %bwipeout!')
  for _, client in ipairs(vim.lsp.get_clients({ name = 'k3lsp' })) do
    client:stop(true)
  end
  wait('the old client stops', 10000, function()
    return #vim.lsp.get_clients({ name = 'k3lsp' }) == 0
  end)
  opts.lsp = { handlers = { ['window/showMessage'] = function(_, result)
    table.insert(messages, result)
  end } }
  require('k3lsp').setup(opts)
  vim.cmd.edit('main.c')
  local client
  wait('the client initializes', 60000, function()
    client = vim.lsp.get_clients({ name = 'k3lsp', bufnr = 0 })[1]
    return client ~= nil and client.initialized
  end)
  return client
end

--- The server's effective settings (k3lsp.status), bounded.
local function effective(client)
  local answer = client:request_sync('workspace/executeCommand', { command = 'k3lsp.status', arguments = {} }, 30000, 0)
  return answer and answer.result and answer.result.settings or vim.NIL
end

report.run(function()
  local every = vim.json.decode(table.concat(vim.fn.readfile('../settings.json'), '\n'))
  local messages = {}
  local client = started(vim.tbl_extend('force', every, { python = vim.env.K3_TEST_PYTHON }), messages)
  out('EVERY', client and effective(client) or vim.NIL)
  out('EVERY_MESSAGES', messages)

  local ok, err = pcall(require('k3lsp').setup, { trigger = 'never', refute_from = 'urgent', witnesses = 'gcc' })
  out('REJECT', { ok = ok, err = err })

  messages = {}
  local bad = { python = vim.env.K3_TEST_PYTHON, endpoint = every.endpoint, insecure = true,
                witnesses = { 'cppcheck', 'cpcheck' }, min_severity = 'high' }
  client = started(bad, messages)
  out('BAD', client and effective(client) or vim.NIL)
  client:request_sync('workspace/executeCommand', { command = 'k3lsp.status', arguments = {} }, 30000, 0)
  out('BAD_MESSAGES', messages)
end)
