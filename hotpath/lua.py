"""Lua scripts of the hot path, one round trip per mutation. Registered once per client.

Each script mirrors :mod:`vcm.hotpath.budget` (the pure specification) exactly; keep them in step.
Scripts are Lua 5.1 (Redis), and also run on fakeredis's Lua for embedded mode.
Every script returns ``{status, json}`` with status ``ok`` | ``replayed`` | ``error``.
Per-batch keys are derived from the agent prefix, which shares the agent's hash tag.
"""

from __future__ import annotations

# Helpers shared by the scripts (prepended to each).
_PRELUDE = r"""
local P = ARGV[1]
local META = P .. 'meta'
local FIFO = P .. 'fifo'
local MSG = P .. 'msg'
local BATCHES = P .. 'batches'
local PH = P .. 'ph'

local function push_chunks(key, items)
  for i = 1, #items, 1000 do
    redis.call('RPUSH', key, unpack(items, i, math.min(i + 999, #items)))
  end
end

-- Counters and thresholds an operation needs, read with one HMGET; changes are collected in
-- `m.dirty` and written back with one HSET (see save_meta).
-- `ph` is the one placeholder of all pending batches; `ph_count` the messages it names.
local FIELDS = {'window', 'max', 'warn', 'flush', 'target', 'pin_cap', 'sum_cap', 'ph_base',
  'pressure_tokens', 'system', 'working', 'pinned_blocks', 'pinned_fifo', 'summary', 'ph', 'fifo',
  'warned', 'msg_seq', 'batch_seq', 'finished_batch', 'rev_seq', 'appended', 'evicted', 'ph_count'}

local function load_meta()
  local vals = redis.call('HMGET', META, unpack(FIELDS))
  if not vals[1] then return nil end
  local m = {dirty = {}}
  for i = 1, #FIELDS do m[FIELDS[i]] = tonumber(vals[i]) end
  if not m.ph_count then
    -- An agent created before placeholders were merged: count its pending messages once (the
    -- next eviction or finish also replaces its per-batch placeholder sum by the merged cost).
    local n = 0
    for _, v in ipairs(redis.call('HVALS', PH)) do n = n + tonumber(string.match(v, '^(%d+)|')) end
    m.ph_count = n
    m.dirty.ph_count = true
  end
  return m
end

local function set(m, field, value)
  m[field] = value
  m.dirty[field] = true
end

local function save_meta(m)
  local args = {}
  for field in pairs(m.dirty) do
    args[#args + 1] = field
    args[#args + 1] = m[field]
  end
  if #args > 0 then redis.call('HSET', META, unpack(args)) end
  m.dirty = {}
end

local function total_of(m)
  return m.system + m.working + m.summary + m.ph + m.fifo
end

local function ph_cost(base, count)
  return base + math.ceil(string.len(tostring(count)) / 3)
end

-- vcm.hotpath.budget.placeholder_part: the one placeholder of `count` pending messages.
local function ph_part(base, count)
  if count > 0 then return ph_cost(base, count) end
  return 0
end

-- Tokens the placeholder grows by when `count` more messages stand behind it.
local function ph_growth(m, count)
  return ph_part(m.ph_base, m.ph_count + count) - m.ph
end

local function parse_entry(e)
  local tok, pin, id = string.match(e, '^(%d+):(%d):(.*)$')
  return tonumber(tok), pin, id
end

local function fail(code, message, extra)
  local t = extra or {}
  t.code = code
  t.message = message
  return {'error', cjson.encode(t)}
end

-- Reads FIFO entries on demand, oldest first, in chunks: a flush reads only the prefix it
-- evicts, not the whole list. `extra` is an entry about to be appended (it follows the list).
local function fifo_reader(extra)
  local cache, fetched, done = {}, 0, false
  local function get(i)
    while i > fetched and not done do
      local chunk = redis.call('LRANGE', FIFO, fetched, fetched + 511)
      for j = 1, #chunk do cache[fetched + j] = chunk[j] end
      fetched = fetched + #chunk
      if #chunk < 512 then
        done = true
        if extra then
          fetched = fetched + 1
          cache[fetched] = extra
        end
      end
    end
    return cache[i]
  end
  return get
end

-- vcm.hotpath.budget.plan_eviction; also returns how many entries it examined.
local function plan_eviction(m, get, total, exclude)
  local chosen, evicted, current, i = {}, 0, total, 0
  while current > m.target do
    local e = get(i + 1)
    if not e then break end
    i = i + 1
    local tok, pin, id = parse_entry(e)
    if pin == '0' and id ~= exclude then
      chosen[#chosen + 1] = i
      evicted = evicted + tok
      current = total - evicted + ph_growth(m, #chosen)
    end
  end
  return chosen, evicted, current, i
end

-- vcm.hotpath.budget.decide_growth; returns decision table or nil, error reply.
-- `get` reads FIFO entries (fifo_reader); it is used only when evicting.
local function decide(m, get, added, added_unev, added_pinned, exclude, admit)
  if admit then
    if added_pinned > 0 and m.pinned_blocks + m.pinned_fifo + added_pinned > m.pin_cap then
      return nil, fail('PIN_LIMIT_EXCEEDED',
        'pinning ' .. added_pinned .. ' more tokens would exceed the pinned cap of ' .. m.pin_cap
        .. ' tokens (' .. (m.pinned_blocks + m.pinned_fifo) .. ' pinned already); unpin or shorten a block',
        {pinned = m.pinned_blocks + m.pinned_fifo, requested = added_pinned, cap = m.pin_cap})
    end
    if added_unev > 0 then
      -- No m.ph: the allowance (ph_base + 4) reserves the largest placeholder whole.
      local fixed = m.system + m.working + m.pinned_fifo + m.summary + added_unev
        + math.max(m.sum_cap - m.summary, 0) + m.ph_base + 4
      if fixed > m.max then
        return nil, fail('TOKEN_BUDGET_EXCEEDED',
          'this change needs ' .. (fixed - m.max) .. ' more tokens than the window allows even after'
          .. ' evicting every unpinned message (max ' .. m.max .. '); shorten it, or unpin/shrink blocks',
          {required_headroom = fixed - m.max, max_tokens = m.max})
      end
    end
  end
  local total = total_of(m) + added
  local warned = m.warned == 1
  if total > m.flush or (not warned and total > m.warn and total + m.pressure_tokens > m.flush) then
    local chosen, evicted, current, examined = plan_eviction(m, get, total, exclude)
    if admit and current > m.max then
      return nil, fail('TOKEN_BUDGET_EXCEEDED',
        'this change needs ' .. (current - m.max) .. ' more tokens than the window allows even after'
        .. ' evicting every unpinned message (max ' .. m.max .. '); shorten it, or unpin/shrink blocks',
        {required_headroom = current - m.max, max_tokens = m.max})
    end
    return {action = 'flush', total = current, warned = warned and current >= m.warn,
            chosen = chosen, evicted = evicted, unreachable = current > m.target, examined = examined}
  end
  if not warned and total > m.warn then
    return {action = 'warning', total = total + m.pressure_tokens, warned = true}
  end
  return {action = 'ok', total = total, warned = warned and total >= m.warn}
end

-- Move the chosen FIFO entries (indexes as `get` numbers them) to a new batch. Only the
-- examined prefix of the list is rewritten.
local function apply_eviction(m, get, chosen, examined, evicted)
  local bid = m.batch_seq + 1
  set(m, 'batch_seq', bid)
  local ids = {}
  for j = 1, #chosen do
    local _, _, id = parse_entry(get(chosen[j]))
    ids[j] = id
  end
  push_chunks(P .. 'evicting:' .. bid, ids)
  if chosen[#chosen] == #chosen then
    redis.call('LTRIM', FIFO, #chosen, -1)
  else
    -- Pinned entries sit among the evicted ones: drop the examined prefix, push back the kept.
    local keep_reversed, c = {}, #chosen
    for i = examined, 1, -1 do
      if chosen[c] == i then c = c - 1 else keep_reversed[#keep_reversed + 1] = get(i) end
    end
    redis.call('LTRIM', FIFO, examined, -1)
    for i = 1, #keep_reversed, 1000 do
      redis.call('LPUSH', FIFO, unpack(keep_reversed, i, math.min(i + 999, #keep_reversed)))
    end
  end
  -- The batch joins the one placeholder; it keeps its own count, for finish to take off, and
  -- the tokens it added to the placeholder (its BatchInfo.placeholder).
  local cost = ph_growth(m, #chosen)
  redis.call('HSET', PH, bid, #chosen .. '|' .. cost)
  redis.call('ZADD', BATCHES, bid, bid)
  set(m, 'fifo', m.fifo - evicted)
  set(m, 'ph', m.ph + cost)
  set(m, 'ph_count', m.ph_count + #chosen)
  set(m, 'evicted', m.evicted + #chosen)
  return {id = bid, count = #chosen, tokens = evicted, placeholder = cost, message_ids = ids}
end

-- Append one message JSON body (without id/seq) to the FIFO; returns id, seq.
local function push_message(m, body, tokens, pinned)
  local seq = m.msg_seq + 1
  local id = 'm' .. seq
  redis.call('HSET', MSG, id, '{"id":"' .. id .. '","seq":' .. seq .. ',' .. string.sub(body, 2))
  redis.call('RPUSH', FIFO, tokens .. ':' .. (pinned and '1' or '0') .. ':' .. id)
  set(m, 'msg_seq', seq)
  set(m, 'fifo', m.fifo + tokens)
  set(m, 'appended', m.appended + 1)
  if pinned then set(m, 'pinned_fifo', m.pinned_fifo + tokens) end
  return id, seq
end

-- Carry out a decision: eviction or pressure message, flags. Returns (batch, pressure_id).
local function carry_out(m, d, get, pressure_body, now)
  local batch, pressure_id = nil, nil
  if d.action == 'flush' and #d.chosen > 0 then
    batch = apply_eviction(m, get, d.chosen, d.examined, d.evicted)
  elseif d.action == 'warning' then
    local body = '{"role":"system","content":' .. pressure_body .. ',"tokens":' .. m.pressure_tokens
      .. ',"pinned":false,"created_at":' .. now .. ',"kind":"pressure"}'
    pressure_id = push_message(m, body, m.pressure_tokens, false)
  end
  local warned = d.warned and 1 or 0
  if m.warned ~= warned then set(m, 'warned', warned) end
  save_meta(m)
  return batch, pressure_id
end

local function idem_check(idem_key, fp)
  if idem_key == '' then return nil end
  local rec = redis.call('GET', idem_key)
  if not rec then return nil end
  local nl = string.find(rec, '\n', 1, true)
  if string.sub(rec, 1, nl - 1) ~= fp then
    return fail('IDEMPOTENCY_MISMATCH',
      'this idempotency key was already used for a different request; use a new key')
  end
  return {'replayed', string.sub(rec, nl + 1)}
end

local function idem_store(idem_key, fp, ttl, result)
  if idem_key ~= '' then
    redis.call('SET', idem_key, fp .. '\n' .. result, 'EX', ttl)
  end
end

-- The part counters as vcm.types.Gauges orders them, for the caller's metrics.
local function gauges_json(m)
  return '[' .. m.window .. ',' .. m.max .. ',' .. m.system .. ',' .. m.working .. ',' .. m.summary
    .. ',' .. m.ph .. ',' .. m.fifo .. ',' .. (m.pinned_blocks + m.pinned_fifo) .. ']'
end

local function batch_json(b)
  if not b then return 'null' end
  if #b.message_ids == 0 then b.message_ids = nil end
  return cjson.encode(b)
end
"""

# KEYS: [1] meta  [2] system
# ARGV: [1] agent prefix  [2] config fingerprint  [3] meta JSON (window, max, warn, flush, target,
#       pin_cap, sum_cap, ph_base, pressure_tokens, system, model, created_at)
#       [4] system prompt  [5] tools JSON  [6] incarnation (kept only by a new agent: a replay keeps
#       the first one)
CREATE_AGENT = (
    _PRELUDE
    + r"""
local existing = redis.call('HGET', META, 'config_fp')
if existing then
  if existing == ARGV[2] then return {'replayed', '{}'} end
  return fail('CONFLICT', 'an agent with this id already exists with a different configuration')
end
local cfg = cjson.decode(ARGV[3])
for k, v in pairs(cfg) do redis.call('HSET', META, k, v) end
for _, f in ipairs({'working', 'pinned_blocks', 'pinned_fifo', 'summary', 'ph', 'fifo', 'warned',
                    'msg_seq', 'batch_seq', 'finished_batch', 'rev_seq', 'appended', 'evicted',
                    'ph_count'}) do
  redis.call('HSET', META, f, 0)
end
redis.call('HSET', META, 'config_fp', ARGV[2], 'incarnation', ARGV[6] or '')
redis.call('HSET', KEYS[2], 'prompt', ARGV[4], 'tools', ARGV[5])
return {'ok', '{}'}
"""
)

# KEYS: [1] meta  [2] fifo  [3] msg  [4] batches  [5] ph  [6] idempotency key (or a dummy)
#       [7] unspooled (the write-behind backlog)
# ARGV: [1] agent prefix  [2] idempotency key name ('' = none)  [3] fingerprint  [4] ttl seconds
#       [5] message body JSON (role, content, tokens, pinned, created_at, ...; no id/seq)
#       [6] tokens  [7] pinned 0|1  [8] pressure text as a JSON string  [9] now
#       [10] write-behind 0|1: track the new messages in the backlog and report its size and
#       oldest time ("backlog": [n, t])
# Reply: {'ok', result, extra}: result exactly as the idempotency record keeps it (so the caller
# copies the record to the store without reading it back), and extra's JSON: the agent's
# incarnation (its store writes are fenced by it) and the backlog. A replay has neither.
APPEND = (
    _PRELUDE
    + r"""
local idem = ARGV[2] ~= '' and KEYS[6] or ''
local replay = idem_check(idem, ARGV[3])
if replay then return replay end
local m = load_meta()
if not m then return fail('NOT_FOUND', 'unknown agent; create it first') end
local tokens = tonumber(ARGV[6])
local pinned = ARGV[7] == '1'
local exclude = 'm' .. (m.msg_seq + 1)
local get = fifo_reader(tokens .. ':' .. ARGV[7] .. ':' .. exclude)
local d, err = decide(m, get, tokens, pinned and tokens or 0, pinned and tokens or 0, exclude, true)
if not d then return err end
local id, seq = push_message(m, ARGV[5], tokens, pinned)
local batch, pressure_id = carry_out(m, d, get, ARGV[8], ARGV[9])
local result = '{"message_id":"' .. id .. '","seq":' .. seq .. ',"tokens":' .. tokens
  .. ',"total":' .. d.total .. ',"action":"' .. d.action .. '","target_unreachable":'
  .. tostring(d.unreachable == true) .. ',"pressure_message_id":'
  .. (pressure_id and ('"' .. pressure_id .. '"') or 'null') .. ',"batch":' .. batch_json(batch)
  .. ',"gauges":' .. gauges_json(m) .. '}'
idem_store(idem, ARGV[3], ARGV[4], result)
local extra = '{"incarnation":' .. cjson.encode(redis.call('HGET', META, 'incarnation') or '')
if ARGV[10] == '1' then
  redis.call('ZADD', KEYS[7], ARGV[9], id)
  if pressure_id then redis.call('ZADD', KEYS[7], ARGV[9], pressure_id) end
  local oldest = redis.call('ZRANGE', KEYS[7], 0, 0, 'WITHSCORES')
  extra = extra .. ',"backlog":[' .. redis.call('ZCARD', KEYS[7]) .. ',' .. oldest[2] .. ']'
end
return {'ok', result, extra .. '}'}
"""
)

# KEYS: [1] meta  [2] blocks  [3] fifo  [4] msg  [5] batches  [6] ph  [7] idempotency key
# ARGV: [1] agent prefix  [2] idempotency key name  [3] fingerprint  [4] ttl  [5] block id
#       [6] expected rev ('' = create)  [7] block body JSON (role, content, tokens, pinned,
#       metadata; no id/rev)  [8] tokens  [9] pinned 0|1  [10] delete 0|1  [11] pressure text JSON
#       [12] now
PUT_BLOCK = (
    _PRELUDE
    + r"""
local BLOCKS = KEYS[2]
local idem = ARGV[2] ~= '' and KEYS[7] or ''
local replay = idem_check(idem, ARGV[3])
if replay then return replay end
local m = load_meta()
if not m then return fail('NOT_FOUND', 'unknown agent; create it first') end
local block_id, expected = ARGV[5], ARGV[6]
local deleting = ARGV[10] == '1'
local old_raw = redis.call('HGET', BLOCKS, block_id)
local old_tokens, old_pinned, old_rev = 0, 0, nil
if old_raw then
  local old = cjson.decode(old_raw)
  old_tokens, old_rev = old.tokens, old.rev
  if old.pinned then old_pinned = old.tokens end
end
if expected == '' then
  if old_raw then
    return fail('REV_CONFLICT', 'block ' .. block_id .. ' already exists; pass its _rev to edit it',
      {current_rev = old_rev})
  end
  if deleting then return fail('NOT_FOUND', 'block ' .. block_id .. ' does not exist') end
elseif not old_raw then
  return fail('NOT_FOUND', 'block ' .. block_id .. ' does not exist')
elseif old_rev ~= expected then
  return fail('REV_CONFLICT', 'block ' .. block_id .. ' changed since revision ' .. expected
    .. '; fetch it again and re-apply your edit', {current_rev = old_rev})
end
local tokens = deleting and 0 or tonumber(ARGV[8])
local pinned_tokens = (ARGV[9] == '1' and not deleting) and tokens or 0
local delta = tokens - old_tokens
local get = fifo_reader(nil)
local d, err = decide(m, get, delta, math.max(delta, 0), pinned_tokens - old_pinned, '', true)
if not d then return err end
local rev = nil
if deleting then
  redis.call('HDEL', BLOCKS, block_id)
else
  rev = tostring(m.rev_seq + 1)
  set(m, 'rev_seq', m.rev_seq + 1)
  redis.call('HSET', BLOCKS, block_id, '{"id":' .. cjson.encode(block_id) .. ',"rev":"' .. rev
    .. '","updated_at":' .. ARGV[12] .. ',' .. string.sub(ARGV[7], 2))
end
set(m, 'working', m.working + delta)
set(m, 'pinned_blocks', m.pinned_blocks + pinned_tokens - old_pinned)
local batch, pressure_id = carry_out(m, d, get, ARGV[11], ARGV[12])
local result = '{"block_id":' .. cjson.encode(block_id) .. ',"rev":' .. (rev and ('"' .. rev .. '"') or 'null')
  .. ',"tokens":' .. tokens .. ',"total":' .. d.total .. ',"action":"' .. d.action
  .. '","deleted":' .. tostring(deleting) .. ',"pressure_message_id":'
  .. (pressure_id and ('"' .. pressure_id .. '"') or 'null') .. ',"batch":' .. batch_json(batch) .. '}'
idem_store(idem, ARGV[3], ARGV[4], result)
-- The block as it was, for the caller's audit footprint: read here, under the rev check, instead
-- of in a second round trip. Not part of the stored result (a replay writes no audit row).
return {'ok', result, old_raw or ''}
"""
)

# KEYS: [1] meta  [2] fifo  [3] msg  [4] batches  [5] ph  [6] summary  [7] evicting:<batch id>
#       [8] unspooled (the batch committed its messages: none is write-behind's backlog any more)
# ARGV: [1] agent prefix  [2] batch id  [3] summary text  [4] summary tokens (rendered message)
#       [5] pressure text JSON  [6] now  [7] the incarnation the job began with (absent: no check)
FINISH_EVICTION = (
    _PRELUDE
    + r"""
local SUMMARY = KEYS[6]
local m = load_meta()
if not m then return fail('NOT_FOUND', 'unknown agent; create it first') end
-- A job of an earlier incarnation of this id (deleted, then re-created) finishes nothing here.
if ARGV[7] and (redis.call('HGET', META, 'incarnation') or '') ~= ARGV[7] then
  return fail('NOT_FOUND', 'the agent was re-created since this batch began', {fenced = true})
end
local bid = tonumber(ARGV[2])
local ph = redis.call('HGET', PH, bid)
if not ph then
  if bid <= m.finished_batch then
    return {'replayed', '{"batch_id":' .. bid .. ',"summary_rev":'
      .. (redis.call('HGET', SUMMARY, 'rev') or '0') .. ',"total":' .. total_of(m) .. ',"batch":null}'}
  end
  return fail('NOT_FOUND', 'no pending eviction batch ' .. bid)
end
local first = redis.call('ZRANGE', BATCHES, 0, 0)[1]
if tonumber(first) ~= bid then
  return fail('CONFLICT', 'batch ' .. bid .. ' must wait for batch ' .. first .. ' to finish',
    {waiting_for = tonumber(first)})
end
local tokens = tonumber(ARGV[4])
if tokens > m.sum_cap then
  return fail('VALIDATION_ERROR', 'summary of ' .. tokens .. ' tokens exceeds the summary cap of '
    .. m.sum_cap, {cap = m.sum_cap})
end
local count = tonumber(string.match(ph, '^(%d+)|'))
local ids = redis.call('LRANGE', KEYS[7], 0, -1)
for i = 1, #ids, 1000 do
  redis.call('HDEL', MSG, unpack(ids, i, math.min(i + 999, #ids)))
  redis.call('ZREM', KEYS[8], unpack(ids, i, math.min(i + 999, #ids)))
end
redis.call('DEL', KEYS[7])
redis.call('ZREM', BATCHES, bid)
redis.call('HDEL', PH, bid)
local rev = redis.call('HINCRBY', SUMMARY, 'rev', 1)
redis.call('HSET', SUMMARY, 'text', ARGV[3], 'tokens', tokens, 'batch_id', bid, 'updated_at', ARGV[6])
-- The placeholder now names only the batches still pending, recomputed from their count.
local left = m.ph_count - count
set(m, 'ph_count', left)
set(m, 'ph', ph_part(m.ph_base, left))
set(m, 'summary', tokens)
set(m, 'finished_batch', bid)
-- Decide on the counters after the install (a change of 0), like the pure policy does: an
-- eviction this starts joins the placeholder as it is now.
local get = fifo_reader(nil)
local d = decide(m, get, 0, 0, 0, '', false)
local batch, pressure_id = carry_out(m, d, get, ARGV[5], ARGV[6])
return {'ok', '{"batch_id":' .. bid .. ',"summary_rev":' .. rev .. ',"total":' .. d.total
  .. ',"action":"' .. d.action .. '","pressure_message_id":'
  .. (pressure_id and ('"' .. pressure_id .. '"') or 'null') .. ',"batch":' .. batch_json(batch) .. '}'}
"""
)

# Agent-initiated eviction (the evict_fifo tool): begin a batch of the oldest `count` unpinned
# messages, and more of the oldest when those would free no more tokens than the placeholder grows
# by; refused when all unpinned messages cannot pay for it (vcm.hotpath.budget.decide_requested_eviction
# says why).
# KEYS: [1] meta  [2] fifo  [3] msg  [4] batches  [5] ph  [6] idempotency key
# ARGV: [1] agent prefix  [2] idempotency key name  [3] fingerprint  [4] ttl  [5] count
EVICT_OLDEST = (
    _PRELUDE
    + r"""
local idem = ARGV[2] ~= '' and KEYS[6] or ''
local replay = idem_check(idem, ARGV[3])
if replay then return replay end
local m = load_meta()
if not m then return fail('NOT_FOUND', 'unknown agent; create it first') end
local want = tonumber(ARGV[5])
local get = fifo_reader(nil)
local chosen, evicted, i = {}, 0, 0
while not (#chosen >= want and evicted > ph_growth(m, #chosen)) do
  local e = get(i + 1)
  if not e then break end
  i = i + 1
  local tok, pin = parse_entry(e)
  if pin == '0' then
    chosen[#chosen + 1] = i
    evicted = evicted + tok
  end
end
local batch = nil
if #chosen > 0 then
  local grown = ph_growth(m, #chosen)
  if evicted <= grown then
    return fail('TOKEN_BUDGET_EXCEEDED', 'evicting would free no room: the ' .. #chosen
      .. ' unpinned messages in the queue hold ' .. evicted .. ' tokens, and the placeholder replacing'
      .. ' them adds ' .. grown .. '; free room by shrinking or deleting working blocks instead',
      {required_headroom = grown - evicted, max_tokens = m.max, placeholder_tokens = grown,
       freed_tokens = evicted})
  end
  batch = apply_eviction(m, get, chosen, i, evicted)
end
local total = total_of(m)
if m.warned == 1 and total < m.warn then set(m, 'warned', 0) end
save_meta(m)
local result = '{"total":' .. total .. ',"batch":' .. batch_json(batch) .. '}'
idem_store(idem, ARGV[3], ARGV[4], result)
return {'ok', result}
"""
)

# Compare-and-set of an agent's heartbeat chain state (vcm.tools.chains): the governor decides on
# the state it read, and the write lands only if no other call wrote in between.
# KEYS: [1] heartbeat hash (fields v = version, s = state JSON)
# ARGV: [1] version the decision was taken on ('0' when the hash did not exist)  [2] new state JSON
# Returns {'ok', new version} or {'conflict', current version}.
HEARTBEAT_CAS = r"""
local v = tonumber(redis.call('HGET', KEYS[1], 'v') or '0')
if v ~= tonumber(ARGV[1]) then return {'conflict', tostring(v)} end
redis.call('HSET', KEYS[1], 'v', v + 1, 's', ARGV[2])
return {'ok', tostring(v + 1)}
"""

# The one idempotency record format, for operations whose effect is not a Lua mutation of its
# own (archival ingestion, recall notes): check and record in one call, so two concurrent requests
# with one key can never both pass.
# KEYS: [1] idempotency key
# ARGV: [1] agent prefix  [2] fingerprint  [3] ttl seconds  [4] result JSON to keep on first use
# Returns {'ok', result} on first use, {'replayed', first result}, or an IDEMPOTENCY_MISMATCH error.
IDEMPOTENCY_CLAIM = (
    _PRELUDE
    + r"""
local replay = idem_check(KEYS[1], ARGV[2])
if replay then return replay end
idem_store(KEYS[1], ARGV[2], ARGV[3], ARGV[4])
return {'ok', ARGV[4]}
"""
)

# Opens an archival ingestion job, or finds the one already open for the same document.
# KEYS: [1] job hash
# ARGV: [1] ttl seconds  [2..] field, value pairs of a new queued job
# Returns {'ok', 'queued'} when (re)opened, or {'replayed', status} when a job that has neither
# failed nor been cancelled exists (such a one is reopened: resubmitting is how a caller retries it).
JOB_OPEN = r"""
local status = redis.call('HGET', KEYS[1], 'status')
if status and status ~= 'failed' and status ~= 'cancelled' then return {'replayed', status} end
local attempts = tonumber(redis.call('HGET', KEYS[1], 'submissions') or '0')
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'submissions', attempts + 1, unpack(ARGV, 2))
redis.call('EXPIRE', KEYS[1], ARGV[1])
return {'ok', 'queued'}
"""

# Moves a job on (running, done, failed, cancelled) unless it is done or cancelled already: a late
# redelivery of a finished job must not turn it back, nor a worker revive a job its agent's reset
# cancelled. KEYS: [1] job hash  ARGV: [1] ttl seconds  [2..] field, value pairs (the first pair is
# 'status', <new status>). Returns 1 when written, 0 when the job is done, cancelled or gone.
JOB_UPDATE = r"""
local status = redis.call('HGET', KEYS[1], 'status')
if not status or status == 'done' or status == 'cancelled' then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV, 2))
redis.call('EXPIRE', KEYS[1], ARGV[1])
return 1
"""

# Cancels a job still queued or running (its agent was reset): the worker sees it before its store
# write and writes nothing. KEYS: [1] job hash  ARGV: [1] ttl seconds  [2..] field, value pairs
# (status cancelled first). Returns 1 when cancelled, 0 when the job had finished or is gone.
JOB_CANCEL = r"""
local status = redis.call('HGET', KEYS[1], 'status')
if status ~= 'queued' and status ~= 'running' then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV, 2))
redis.call('EXPIRE', KEYS[1], ARGV[1])
return 1
"""

# Compare-and-set of a string: a keyed token rotation replaces the token only if it is still the
# one the rotation replaced. KEYS: [1] key  ARGV: [1] expected value  [2] new value. Returns 1 / 0.
SET_IF_EQUAL = r"""
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2])
  return 1
end
return 0
"""

# Prepended to a mutation so that an agent's bearer token is checked in the same call, not in a
# round trip of its own (the HTTP API's append: vcm.api.auth keeps the token's SHA-256 under the
# agent's hash tag). The guarded script takes one key and one argument more, both last:
# KEYS[#KEYS] = the agent's token key, ARGV[#ARGV] = the SHA-256 (hex) of the presented token.
# The scripts it guards index KEYS and ARGV by fixed positions, so the trailing pair moves nothing
# they read. Unless the digests are equal it returns UNAUTHORIZED and changes nothing, so a
# rotated or revoked token stops working at once. Plain `~=` is safe here: it compares digests of
# a 256-bit secret, and no caller can steer which digest prefix a guess of theirs produces.
TOKEN_GUARD = r"""
if redis.call('GET', KEYS[#KEYS]) ~= ARGV[#ARGV] then
  return {'error', cjson.encode({code = 'UNAUTHORIZED', message = 'invalid bearer token'})}
end
"""

# APPEND for a caller holding an agent token: APPEND's KEYS followed by the agent's token key, and
# APPEND's ARGV followed by the presented token's SHA-256 (see TOKEN_GUARD).
APPEND_AS_AGENT = TOKEN_GUARD + APPEND

# Rebuild of a missing agent from the store (vcm.durable): its configuration, counters, FIFO,
# messages, blocks, summary and token hash in one call, so no append can slip in between and
# reuse an id. A no-op ('replayed') when the agent exists.
# KEYS: [1] meta  [2] system  [3] fifo  [4] msg  [5] blocks  [6] summary  [7] token  [8] batches
#       [9] ph
# ARGV: [1] agent prefix  [2] META fields JSON (config, config_fp and counters)  [3] prompt
#       [4] tools JSON  [5] FIFO entries JSON array, oldest first  [6] [[message id, JSON], ...]
#       [7] [[block id, JSON], ...]  [8] summary fields JSON ({} for none)  [9] token hash or ''
#       [10] pressure text as a JSON string  [11] now
# Then, like a summary install, it decides on the restored counters: a FIFO over the flush line
# (the messages of a batch that had begun but not committed are back in it) begins a batch.
RESTORE_AGENT = (
    _PRELUDE
    + r"""
if redis.call('EXISTS', META) == 1 then return {'replayed', '{}'} end
redis.call('DEL', FIFO, MSG, KEYS[5], KEYS[6], BATCHES, PH)
for k, v in pairs(cjson.decode(ARGV[2])) do redis.call('HSET', META, k, v) end
redis.call('HSET', KEYS[2], 'prompt', ARGV[3], 'tools', ARGV[4])
local entries = cjson.decode(ARGV[5])
if #entries > 0 then push_chunks(FIFO, entries) end
for _, pair in ipairs(cjson.decode(ARGV[6])) do redis.call('HSET', MSG, pair[1], pair[2]) end
for _, pair in ipairs(cjson.decode(ARGV[7])) do redis.call('HSET', KEYS[5], pair[1], pair[2]) end
for k, v in pairs(cjson.decode(ARGV[8])) do redis.call('HSET', KEYS[6], k, v) end
if ARGV[9] ~= '' then redis.call('SET', KEYS[7], ARGV[9]) end
local m = load_meta()
local get = fifo_reader(nil)
local d = decide(m, get, 0, 0, 0, '', false)
local batch, pressure_id = carry_out(m, d, get, ARGV[10], ARGV[11])
save_meta(m)
return {'ok', '{"total":' .. d.total .. ',"action":"' .. d.action .. '","pressure_message_id":'
  .. (pressure_id and ('"' .. pressure_id .. '"') or 'null') .. ',"batch":' .. batch_json(batch) .. '}'}
"""
)

# Forget one message still in the main context (vcm.service.lifecycle): it leaves the FIFO with
# its tokens (and its pinned share), its body leaves the message hash, and the warning re-arms
# when the total falls below it, as after a requested eviction. A message of a pending eviction
# batch is refused (CONFLICT): the cold path is committing that batch (summary, facts, recall),
# and taking a message out from under it would let the commit write it back; the caller forgets
# it once the batch has committed. Nothing else moves: no eviction is decided (the total only
# falls) and `appended` keeps counting appends.
# KEYS: [1] meta  [2] fifo  [3] msg  [4] batches
# ARGV: [1] agent prefix  [2] message id
# Returns {'ok', {"removed": bool, "tokens", "pinned", "total", "gauges"}}: removed false when the
# message is in neither the FIFO nor a batch (already gone, or never in the context).
FORGET_MESSAGE = (
    _PRELUDE
    + r"""
local m = load_meta()
if not m then return fail('NOT_FOUND', 'unknown agent; create it first') end
local id = ARGV[2]
local entry = nil
local n = redis.call('LLEN', FIFO)
for start = 0, n - 1, 512 do
  for _, e in ipairs(redis.call('LRANGE', FIFO, start, start + 511)) do
    local _, _, eid = parse_entry(e)
    if eid == id then entry = e break end
  end
  if entry then break end
end
if not entry then
  if redis.call('HEXISTS', MSG, id) == 1 then
    for _, bid in ipairs(redis.call('ZRANGE', BATCHES, 0, -1)) do
      for _, bmid in ipairs(redis.call('LRANGE', P .. 'evicting:' .. bid, 0, -1)) do
        if bmid == id then
          return fail('CONFLICT', 'message ' .. id .. ' is in eviction batch ' .. bid .. ', which is being'
            .. ' committed to recall now; forget it again once the batch has committed (seconds)',
            {message_id = id, batch_id = tonumber(bid)})
        end
      end
    end
  end
  return {'ok', '{"removed":false,"tokens":0,"pinned":false,"total":' .. total_of(m) .. '}'}
end
local tok, pin = parse_entry(entry)
redis.call('LREM', FIFO, 1, entry)
redis.call('HDEL', MSG, id)
set(m, 'fifo', m.fifo - tok)
if pin == '1' then set(m, 'pinned_fifo', m.pinned_fifo - tok) end
local total = total_of(m)
if m.warned == 1 and total < m.warn then set(m, 'warned', 0) end
save_meta(m)
return {'ok', '{"removed":true,"tokens":' .. tok .. ',"pinned":' .. tostring(pin == '1') .. ',"total":' .. total
  .. ',"gauges":' .. gauges_json(m) .. '}'}
"""
)

# Replace the summary of the batch the hot state holds now (a forget's re-summarisation): only
# while the summary is still that batch's (an eviction finished meanwhile: CONFLICT, the caller
# re-reads). A longer summary can push past flush like an installed one; the same decision runs.
# KEYS: [1] meta  [2] fifo  [3] msg  [4] batches  [5] ph  [6] summary
# ARGV: [1] agent prefix  [2] batch id  [3] text  [4] tokens  [5] pressure text  [6] now
REPLACE_SUMMARY = (
    _PRELUDE
    + r"""
local SUMMARY = KEYS[6]
local m = load_meta()
if not m then return fail('NOT_FOUND', 'unknown agent; create it first') end
local bid = tonumber(ARGV[2])
local held = tonumber(redis.call('HGET', SUMMARY, 'batch_id') or '0')
if held ~= bid then
  return fail('CONFLICT', 'the summary is of batch ' .. held .. ' now, not ' .. bid, {batch_id = held})
end
local tokens = tonumber(ARGV[4])
if tokens > m.sum_cap then
  return fail('VALIDATION_ERROR', 'summary of ' .. tokens .. ' tokens exceeds the summary cap of '
    .. m.sum_cap, {cap = m.sum_cap})
end
local rev = redis.call('HINCRBY', SUMMARY, 'rev', 1)
redis.call('HSET', SUMMARY, 'text', ARGV[3], 'tokens', tokens, 'updated_at', ARGV[6])
set(m, 'summary', tokens)
local get = fifo_reader(nil)
local d = decide(m, get, 0, 0, 0, '', false)
local batch, pressure_id = carry_out(m, d, get, ARGV[5], ARGV[6])
return {'ok', '{"batch_id":' .. bid .. ',"summary_rev":' .. rev .. ',"total":' .. d.total
  .. ',"action":"' .. d.action .. '","pressure_message_id":'
  .. (pressure_id and ('"' .. pressure_id .. '"') or 'null') .. ',"batch":' .. batch_json(batch) .. '}'}
"""
)

# When the FIFO's newest message was appended ('' for an empty FIFO): read once per agent and
# process, for the date markers (vcm.hotpath.timeline). One round trip; read-only.
# KEYS: [1] fifo  [2] msg
LATEST_MESSAGE_TIME = r"""
local entry = redis.call('LINDEX', KEYS[1], -1)
if not entry then return '' end
local id = string.match(entry, '^[^:]*:[^:]*:(.*)$')
local body = id and redis.call('HGET', KEYS[2], id)
if not body then return '' end
return tostring(cjson.decode(body).created_at or '')
"""
