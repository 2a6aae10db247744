'use strict'

/**
 * touch for the Redis session store: extend the session's expiry and refresh
 * its stored cookie (as MemoryStore does), leaving its data as stored, in one
 * round trip. A session that is gone or expired stays gone, and a record
 * express-session cannot read is never made readable. (connect-redis's touch
 * only moves the key's expiry: the stored cookie.expires would fall behind.)
 */

const crypto = require('crypto')
const debug = require('debug')('clusterize:session')
const { whyNotInflatable } = require('./inflatable')

/**
 * touch: replace the stored record only if it is still the one we read (a
 * concurrent save wins, a deleted or expired session stays gone).
 */
const TOUCH_SCRIPT = "if redis.call('GET', KEYS[1]) == ARGV[1] then " +
  "redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3]) return 1 end return 0"

/**
 * touch in one round trip. ARGV: the new cookie's JSON, PX, the client's now
 * (ms). Returns 0 (gone or expired: left as is), 1 (cookie replaced, the rest
 * of the record byte for byte), or the stored record when the script cannot
 * decide (not JSON.stringify's shape, a cookie field other than expires and
 * originalMaxAge differs, an expires it cannot parse): refresh() then
 * decides in JavaScript, with the record in hand.
 */
const FAST_TOUCH_SCRIPT = `
local raw = redis.call('GET', KEYS[1])
if not raw then return 0 end
if string.sub(raw, 1, 11) ~= '{"cookie":{' then return raw end
local ok, doc = pcall(cjson.decode, raw)
if not ok or type(doc) ~= 'table' or type(doc.cookie) ~= 'table' then return raw end
local stored, new = doc.cookie, cjson.decode(ARGV[1])
for k, v in pairs(stored) do if k ~= 'expires' and k ~= 'originalMaxAge' and new[k] ~= v then return raw end end
for k, v in pairs(new) do if k ~= 'expires' and k ~= 'originalMaxAge' and stored[k] ~= v then return raw end end
local x = stored.expires
if x ~= nil and x ~= cjson.null then
  if type(x) ~= 'string' then return raw end
  local y, mo, d, h, mi, s, ms = string.match(x, '^(%d%d%d%d)%-(%d%d)%-(%d%d)T(%d%d):(%d%d):(%d%d)%.(%d%d%d)Z$')
  if not y then return raw end
  y, mo, d, h, mi, s = tonumber(y), tonumber(mo), tonumber(d), tonumber(h), tonumber(mi), tonumber(s)
  if mo < 1 or mo > 12 or d < 1 or d > 31 or h > 23 or mi > 59 or s > 59 then return raw end
  if mo <= 2 then y = y - 1 end
  local era = math.floor(y / 400)
  local yoe = y - era * 400
  local doy = math.floor((153 * (mo > 2 and mo - 3 or mo + 9) + 2) / 5) + d - 1
  local days = era * 146097 + yoe * 365 + math.floor(yoe / 4) - math.floor(yoe / 100) + doy - 719468
  if ((days * 24 + h) * 60 + mi) * 60000 + s * 1000 + tonumber(ms) <= tonumber(ARGV[3]) then return 0 end
end
local i = 12
while true do
  local j = string.find(raw, '[{}%[%]"]', i)
  if not j then return raw end
  local c = string.sub(raw, j, j)
  if c == '}' then i = j break end
  if c ~= '"' then return raw end
  i = j + 1
  while true do
    local q = string.find(raw, '["\\\\]', i)
    if not q then return raw end
    if string.sub(raw, q, q) == '"' then i = q + 1 break end
    i = q + 2
  end
end
redis.call('SET', KEYS[1], '{"cookie":' .. ARGV[1] .. string.sub(raw, i + 1), 'PX', ARGV[2])
return 1`
const FAST_TOUCH_SHA = crypto.createHash('sha1').update(FAST_TOUCH_SCRIPT).digest('hex')

/** A touch this soon after this store saved the same session object, moving its expiry less than this, is skipped. */
const TOUCH_AFTER_SET_MS = 1000

/**
 * @param {import('./redis-store').ClusterizeRedisStore} store
 * @param {string} sid
 * @param {object} sess the session express-session holds, its cookie refreshed
 * @returns {Promise<void>}
 */
async function touchSession (store, sid, sess) {
  const commands = store.commands
  const key = store.prefix + sid
  const ms = store.msLeft(sess)
  if (!(ms > 0)) return void await commands.send('del', [key])
  if (!sess || !sess.cookie) return void await commands.send('pexpire', [key, Math.ceil(ms)])
  // A save of this same session object just stored it with (almost) this expiry.
  const set = store.justSet.get(sess)
  const moved = set === undefined ? -1 : Date.now() + ms - set.deadline
  if (set !== undefined && set.sid === sid && moved >= 0 && moved < TOUCH_AFTER_SET_MS) {
    debug('touch %s: saved just before, skipped', sid)
    return
  }
  const args = [1, key, JSON.stringify(sess.cookie), Math.ceil(ms), Date.now()]
  const fast = await commands.send('evalsha', [FAST_TOUCH_SHA, ...args]).catch((err) => {
    if (!/NOSCRIPT/.test(err.message)) throw err
    return commands.send('eval', [FAST_TOUCH_SCRIPT, ...args])
  })
  if (fast === 0 || fast === 1) return
  // The script could not decide: the careful path, with the record it returned.
  const stored = fast
  const current = store.parse(stored)
  if (whyNotInflatable(current) !== null) {
    await commands.send('pexpire', [key, Math.ceil(ms)])
    return
  }
  if (cookieExpired(current)) return
  current.cookie = sess.cookie
  // Measured again after the read, so the round trip does not lengthen the session.
  const left = store.msLeft(sess)
  if (!(left > 0)) return void await commands.send('del', [key])
  const replaced = await commands.send('eval', [TOUCH_SCRIPT, 1, key, stored, JSON.stringify(current), Math.ceil(left)])
  if (replaced === 0) debug('touch %s: session saved or removed meanwhile, left as is', sid)
}

/**
 * Has the session's cookie expired? Redis drops the key a command's transit
 * after that (PX is relative); the cookie decides to the millisecond, as in
 * MemoryStore and the cluster store.
 * @param {object} sess an inflatable session
 * @returns {boolean}
 */
function cookieExpired (sess) {
  const expires = sess.cookie.expires
  return typeof expires === 'string' && new Date(expires).getTime() <= Date.now()
}

module.exports = { touchSession, cookieExpired }
