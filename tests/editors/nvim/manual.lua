-- Scenario with trigger = 'manual': saving audits nothing; :K3Audit audits the file, :K3AuditWorkspace
-- the workspace (served from the result cache by then). Server counters come from k3lsp.status.
local report = dofile(vim.fs.dirname(debug.getinfo(1, 'S').source:sub(2)) .. '/report.lua')
local out, wait = report.out, report.wait
local k3lsp = require('k3lsp')

local notes = report.capture_notes()

local function counters()
  local result
  k3lsp.execute('k3lsp.status', {}, function(r)
    result = r
  end)
  wait('k3lsp.status', 30000, function()
    return result ~= nil
  end)
  return result and result.counters
end

local function run(command)
  local before = #notes
  vim.cmd(command)
  wait(command, 120000, function()
    return #notes > before
  end)
  return notes[before + 1] or vim.NIL
end

report.run(function()
  local buf = vim.api.nvim_get_current_buf()
  local expect = tonumber(vim.env.K3_TEST_EXPECT)
  if not wait('client', 60000, function()
    local client = vim.lsp.get_clients({ name = 'k3lsp', bufnr = buf })[1]
    return client ~= nil and client.initialized
  end) then
    return
  end

  vim.cmd('write')
  -- The server handles didSave before this request: an audit on save would have started by now.
  out('SAVED', { counters = counters(), diagnostics = #vim.diagnostic.get(buf) })

  local note = run('K3Audit')
  wait('diagnostics', 120000, function()
    return #vim.diagnostic.get(buf) >= expect
  end)
  out('AUDIT', { note = note, diagnostics = #vim.diagnostic.get(buf) })

  note = run('K3AuditWorkspace')
  out('WORKSPACE', { note = note, counters = counters(), diagnostics = #vim.diagnostic.get(buf) })
end)
