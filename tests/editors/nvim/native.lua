-- Scenario for lsp/k3lsp.lua: vim.lsp.enable('k3lsp') alone attaches to C buffers and headers, cached
-- findings show on open without a save, the commands exist; then :helptags and :help k3lsp.
local report = dofile(vim.fs.dirname(debug.getinfo(1, 'S').source:sub(2)) .. '/report.lua')
local out, wait = report.out, report.wait

report.run(function()
  local buf = vim.api.nvim_get_current_buf()
  if not wait('attach', 30000, function()
    return #vim.lsp.get_clients({ name = 'k3lsp', bufnr = buf }) > 0
  end) then
    return
  end
  local client = vim.lsp.get_clients({ name = 'k3lsp', bufnr = buf })[1]
  out('CLIENT', {
    cmd = client.config.cmd,
    filetypes = client.config.filetypes,
    root = client.root_dir,
    commands = vim.fn.exists(':K3Audit') == 2 and vim.fn.exists(':K3Status') == 2,
  })
  -- main.c was audited by an earlier server with the same cache: its findings show without a save.
  wait('cached findings', 60000, function()
    return #vim.diagnostic.get(buf) >= tonumber(vim.env.K3_TEST_EXPECT)
  end)
  out('CACHED', #vim.diagnostic.get(buf))
  vim.cmd.edit('include/api.h')
  wait('header attach', 30000, function()
    return #vim.lsp.get_clients({ name = 'k3lsp', bufnr = 0 }) > 0
  end)
  out('HEADER', { filetype = vim.bo.filetype, attached = #vim.lsp.get_clients({ name = 'k3lsp', bufnr = 0 }) > 0 })

  vim.cmd('helptags ' .. vim.fn.fnameescape(vim.env.K3_TEST_PLUGIN .. '/doc'))
  vim.cmd('help k3lsp')
  out('HELP', {
    file = vim.api.nvim_buf_get_name(0),
    buftype = vim.bo.buftype,
    line = vim.api.nvim_get_current_line(),
  })
  vim.cmd('help :K3Audit')
  out('HELP_TAG', vim.api.nvim_get_current_line())
end)
