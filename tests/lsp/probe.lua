-- Headless Neovim as an LSP client: open a mapping file, wait for rca-lsp diagnostics, hover the first finding.
-- Arguments come from environment variables so the test decides the server command, file and output.
local server = vim.split(os.getenv("RCA_SERVER_CMD"), "\t")
local file = os.getenv("RCA_FILE")
local out = os.getenv("RCA_OUT")
local wanted = os.getenv("RCA_WANTED_CODE")

local client_id = vim.lsp.start_client({
  name = "rca-lsp",
  cmd = server,
  root_dir = vim.fn.fnamemodify(file, ":h:h"),
})
vim.cmd("edit " .. file)
vim.lsp.buf_attach_client(0, client_id)

local function has_wanted()
  for _, d in ipairs(vim.diagnostic.get(0)) do
    local code = d.code or (d.user_data and d.user_data.lsp and d.user_data.lsp.code)
    if code == wanted then return true end
  end
  return false
end
vim.wait(30000, has_wanted, 50)

local rows = {}
local target = nil
for _, d in ipairs(vim.diagnostic.get(0)) do
  local code = d.code or (d.user_data and d.user_data.lsp and d.user_data.lsp.code)
  table.insert(rows, { lnum = d.lnum, col = d.col, severity = d.severity, code = code, message = d.message })
  if code == wanted and target == nil then target = d end
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

local handle = io.open(out, "w")
handle:write(vim.fn.json_encode({ diagnostics = rows, hover = hover }))
handle:close()
vim.lsp.stop_client(client_id)
vim.cmd("qa!")
