-- Scenario: the backend is still loading its model when a C file is opened and audited. The status line
-- says so ("k3: backend loading (N %)"), the audit waits for the model, and its findings arrive.
local report = dofile(vim.fs.dirname(debug.getinfo(1, 'S').source:sub(2)) .. '/report.lua')
local out, wait = report.out, report.wait

report.run(function()
  local k3lsp = require('k3lsp')
  local lines = {}
  vim.api.nvim_create_autocmd('User', {
    pattern = 'K3lspStatus',
    callback = function()
      local line = k3lsp.statusline()
      if lines[#lines] ~= line then
        table.insert(lines, line)
      end
    end,
  })
  vim.cmd.edit('main.c')
  wait('initialized', 60000, function()
    return #vim.lsp.get_clients({ name = 'k3lsp', bufnr = 0 }) > 0
  end)
  vim.cmd('K3Audit')
  wait('findings', 120000, function()
    return #vim.diagnostic.get(0) >= tonumber(vim.env.K3_TEST_EXPECT)
  end)
  -- the audit's progress may end after its diagnostics are published: the status line turns idle then
  wait('idle', 30000, function()
    return lines[#lines] == 'k3: idle'
  end)
  out('STATUSLINES', lines)
  out('FINDINGS', #vim.diagnostic.get(0))
end)
