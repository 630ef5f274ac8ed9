-- Headless Neovim with the README's configuration (loaded with -u): open a mapping file, wait for rca-lsp's
-- diagnostics, hover the first finding with the wanted code. Arguments come from environment variables.
local file = os.getenv("RCA_FILE")
local out = os.getenv("RCA_OUT")
local wanted = os.getenv("RCA_WANTED_CODE")

vim.cmd("edit " .. file)

local function code_of(d)
  return d.code or (d.user_data and d.user_data.lsp and d.user_data.lsp.code)
end
local function has_wanted()
  for _, d in ipairs(vim.diagnostic.get(0)) do
    if code_of(d) == wanted then return true end
  end
  return false
end
vim.wait(30000, has_wanted, 50)

local rows = {}
local target = nil
for _, d in ipairs(vim.diagnostic.get(0)) do
  table.insert(rows, { lnum = d.lnum, col = d.col, severity = d.severity, code = code_of(d), message = d.message })
  if code_of(d) == wanted and target == nil then target = d end
end

local hover = nil
if target ~= nil then
  local params = {
    textDocument = { uri = vim.uri_from_fname(file) },
    position = { line = target.lnum, character = target.col + 3 },
  }
  local results = vim.lsp.buf_request_sync(0, "textDocument/hover", params, 10000)
  for _, res in pairs(results or {}) do
    if res.result and res.result.contents then hover = res.result.contents.value end
  end
end

local clients = {}
for _, client in pairs(vim.lsp.buf_get_clients(0)) do
  table.insert(clients, { name = client.name })
end

local handle = io.open(out, "w")
handle:write(vim.fn.json_encode({ diagnostics = rows, hover = hover, clients = clients }))
handle:close()
vim.lsp.stop_client(vim.lsp.get_active_clients())
vim.cmd("qa!")
