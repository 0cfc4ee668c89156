-- Scenario: `:checkhealth k3lsp`, its report buffer printed line by line.
local report = dofile(vim.fs.dirname(debug.getinfo(1, 'S').source:sub(2)) .. '/report.lua')

report.run(function()
  vim.cmd('checkhealth k3lsp')
  for _, line in ipairs(vim.api.nvim_buf_get_lines(0, 0, -1, false)) do
    report.out('HEALTH', line)
  end
end)
