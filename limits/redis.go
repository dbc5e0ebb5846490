package limits

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Key layout in Redis, under the prefix given to NewRedis (scope is Scope.String(),
// e.g. "key:k_123" or "project:platform/model:big"):
//
//	<prefix>{<scope>}:rate                      hash {rl: requests level, rt: µs of rl, tl and tt
//	                                            the same for tokens, x: expiry set, µs}: buckets
//	<prefix>{<scope>}:inflight                  zset request id → lease deadline (µs): concurrency slots
//	<prefix>{<scope>}:budget:<period>:<start>   hash {spent, held, r:<request id>: reserved micros}
//	<prefix>{<scope>}:budget:<period>:<start>:leases   zset request id → lease deadline (µs)
//
// <start> is the period's start in unix seconds (0 for a total budget). A bucket expires
// once it would be full again (an absent bucket is a full one); a slot set a minute after
// its last lease; a budget period's keys an hour after the period's end plus the lease (a
// total budget's never). A budget hash without "spent" is seeded from the ledger.
//
// Every key of one scope carries the scope as its hash tag ({...}), so that in a Redis
// Cluster they all live in one slot and a script on one scope touches one slot. (A '}'
// inside a scope ends the tag early, at the same place in each of the scope's keys: they
// still share a slot.) keysOf and budgetKeys are the only code that makes these names.
//
// On one server, or a primary watched by Sentinel, one script decides every scope of an
// Ask at once. In a Cluster the scopes of an Ask live in different slots: one script per
// scope goes in one pipeline (one round trip to each node involved), and when a scope
// refuses (or needs seeding), the scopes reserved in the same call are released again
// before the answer (see reserveEach).

// NewRedis returns counters shared through Redis by every gateway using the same client
// address and prefix (e.g. "switchyard:"). Every reserve and every settle is one Lua
// script run atomically by the server; a reserve is one round trip, and settlements are
// queued and sent ahead of the next call in the same pipeline (see settler.go). The client connects lazily, so a
// gateway can start while Redis is down; ParseRedisURL gives options that fail fast. The
// Limiter does not close the client.
//
// With a *redis.ClusterClient the scopes of one Ask are reserved and settled by one script
// each (see the key layout above); with any other client (one server, Sentinel) by one
// script together. The prefix should hold no '{' or '}': it would change the hash tags.
func NewRedis(client redis.UniversalClient, prefix string) Counters {
	_, cluster := client.(*redis.ClusterClient)
	return &redisCounters{c: client, prefix: prefix, perScope: cluster}
}

// ParseRedisURL reads a redis:// or rediss:// URL into client options fit for admission
// control: a dropped server costs a request at most about half a second (dial, read and
// write timeouts of 500ms, the context's deadline honoured, one retry).
func ParseRedisURL(url string) (*redis.Options, error) {
	o, err := redis.ParseURL(url)
	if err != nil {
		return nil, err
	}
	o.DialTimeout, o.ReadTimeout, o.WriteTimeout = 500*time.Millisecond, 500*time.Millisecond, 500*time.Millisecond
	o.ContextTimeoutEnabled = true
	o.MaxRetries = 1
	o.DialerRetries = 1
	o.PoolTimeout = time.Second
	return o, nil
}

type redisCounters struct {
	c      redis.UniversalClient
	prefix string
	// perScope sends one script per scope of a reservation (a Redis Cluster: a script
	// may touch only one slot) rather than one for them all.
	perScope bool

	mu      sync.Mutex
	stale   map[string]struct{} // budget hashes whose spend was counted elsewhere during an outage
	release []*Reservation      // reservations that could not be released during an outage

	// Settlements waiting to be sent: with the next call this gateway makes to Redis
	// (in the same pipeline, ahead of it), or by the flusher within settleEvery.
	qmu         sync.Mutex
	queue       []*pendingSettle
	closed      bool
	kick        chan struct{} // wakes the flusher; nil until the first settle
	armed       bool          // the flusher waits for the oldest queued (under qmu)
	stop        chan struct{}
	flusherDone chan struct{}
	rel         map[string]map[string]*pendingSettle // slot key → id → its settlement, not answered yet
	settleEvery time.Duration                        // 0: defaultSettleEvery
	timeout     time.Duration                        // bounds a flush: the Limiter's Timeout
	flushMu     sync.Mutex                           // held while the flusher sends
	loaded      atomic.Bool                          // the settle script is in the server's script cache
	sending     sync.RWMutex                         // read-held while a batch is on its way, for Flush to wait on

	// Calls to Redis: at most maxPipelines on their way, the others waiting (see exec).
	cmu       sync.Mutex
	pipelines int
	waiting   []*call

	kmu  sync.RWMutex
	keys map[Scope]*scopeKeys // see keysOf
}

// The scripts keep to the arithmetic of refill, waitFor and fullIn.
//
// The scripts make few redis.calls: a scope's two buckets share one hash, read once and written once; a
// key's expiry is set only when the one recorded in it (x, in the Limiter's µs) falls
// short, and then a minute further on; leases past their deadline are swept only when
// they could change an answer (or once a second for a budget, beyond 1024 for a slot
// set). Money and levels are doubles: exact below 2^53, far above MaxBudgetMicros.
const luaCommon = `
local minute = 60000000
-- Numbers reach Redis as text: integers go through %d, never Lua's default %.14g.
local function int(x) return string.format('%d', x) end
-- rates caches each bucket hash read: its buckets r and t ({level, µs of level}), x, and
-- what to write back (set) and the expiry its buckets need (need).
local rates, rorder = {}, {}
local function rate(key)
  local h = rates[key]
  if not h then
    local v = redis.call('HMGET', key, 'rl', 'rt', 'tl', 'tt', 'x')
    h = {r = {v[1], v[2]}, t = {v[3], v[4]}, x = tonumber(v[5] or '0'), set = {}, need = 0}
    rates[key] = h
    rorder[#rorder + 1] = key
  end
  return h
end
local function level_of(key, kind, limit, now)
  local b = rate(key)[kind]
  if not b[1] then return limit end
  local l = tonumber(b[1])
  local dt = now - tonumber(b[2])
  if dt > 0 then l = l + dt * limit / minute end
  if l > limit then l = limit end
  return l
end
local function store_level(key, kind, l, limit, now, nowS)
  local h = rate(key)
  local s = h.set
  s[#s + 1] = kind .. 'l'
  s[#s + 1] = string.format('%.17g', l)
  s[#s + 1] = kind .. 't'
  s[#s + 1] = nowS
  local full = math.ceil((limit - l) * minute / limit - 1e-6)
  -- The hash outlives the bucket's refill by a second: an absent bucket is a full one.
  local need = now + (math.floor(full / 1000) + 1000) * 1000
  if need > h.need then h.need = need end
  return full
end
-- write_rates writes each bucket hash changed, one HSET each; PEXPIRE only when the
-- expiry recorded falls within a second of what is needed (a second for gateways'
-- clocks to differ by), and then to a minute beyond it.
local function write_rates(now)
  for _, key in ipairs(rorder) do
    local h = rates[key]
    local s = h.set
    if #s > 0 then
      if h.need + 1000000 > h.x then
        local x = h.need + minute
        s[#s + 1] = 'x'
        s[#s + 1] = int(x)
        redis.call('HSET', key, unpack(s))
        redis.call('PEXPIRE', key, int(math.floor((x - now) / 1000)))
      else
        redis.call('HSET', key, unpack(s))
      end
    end
  end
end
-- release gives back what request id holds in budget bk (amt, as HGET of r:<id> read
-- it) and drops its lease from lk.
local function release(bk, lk, id, amt)
  if amt then
    redis.call('HINCRBY', bk, 'held', int(-tonumber(amt)))
    redis.call('HDEL', bk, 'r:' .. id)
  end
  redis.call('ZREM', lk, id)
end
local function expire_budget(bk, lk, nowS)
  for _, g in ipairs(redis.call('ZRANGEBYSCORE', lk, '-inf', nowS, 'LIMIT', 0, 100)) do
    release(bk, lk, g, redis.call('HGET', bk, 'r:' .. g))
    -- A gateway's lease (lease_redis.go) lapsed: it died holding spend it had not added
    -- yet. The period's spend is seeded again from the ledger, which has it.
    if string.sub(g, 1, 2) == 'L:' then redis.call('HDEL', bk, 'spent') end
  end
end
local function set_expiry(key, ttlS)
  if ttlS ~= '0' then redis.call('PEXPIRE', key, ttlS) end
end
`

// reserveScript checks every item, then reserves every item, or nothing.
// KEYS: per item: r/t (bucket) and s (slots): one key; b (budget): the hash and its leases.
// ARGV: now µs, request id, lease deadline µs, lease ms, the number of items n, then per
// item: kind, limit, take, seed (-1: none), time to live of the budget keys (ms, 0:
// forever); then per slot item, in order: a count c and c request ids whose slots this
// gateway has released but whose settlement is still on its way (freed here before they
// could refuse, so that their own client's next request never waits for it; ZREM twice
// is harmless).
// Answer: {status, then per item two integers}; status 0 admitted (buckets: whole units
// left, µs to full; slots: in flight, those released and lapsed included until they
// could refuse; budgets: spent, held), 1 needs seeding (budgets: 2
// when its counter is absent), 2 refused (1 when the item refuses, and its wait in µs,
// -1 for never; budgets: what requests in flight hold when only they refuse, else 0).
var reserveScript = redis.NewScript(luaCommon + `
local nowS, id, deadline, leaseMS = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
local now = tonumber(nowS)
local n = tonumber(ARGV[5])
local rp = 6 + n * 5
local out = {0}
-- Each item's arguments are read once, here, for both passes.
local keys, kinds, limits, takes = {}, {}, {}, {}
local lvl, cnt, spentv, heldv, swept = {}, {}, {}, {}, {}
local seeding, refusing = false, false
local k = 1
for i = 1, n do
  local a = 5 + (i - 1) * 5
  local kind, limit, take, seed = ARGV[a+1], tonumber(ARGV[a+2]), tonumber(ARGV[a+3]), tonumber(ARGV[a+4])
  local v1, v2 = 0, 0
  keys[i], kinds[i], limits[i], takes[i] = k, kind, limit, take
  if kind == 'r' or kind == 't' then
    local l = level_of(KEYS[k], kind, limit, now)
    k = k + 1
    lvl[i] = l
    if take > l then
      refusing, v1 = true, 1
      if take > limit then v2 = -1 else v2 = math.ceil((take - l) * minute / limit - 1e-6) end
    end
  elseif kind == 's' then
    local released = tonumber(ARGV[rp])
    local first = rp + 1
    rp = rp + 1 + released
    local c = redis.call('ZCARD', KEYS[k])
    -- Slots this gateway has released (their settlements on their way) and lapsed
    -- leases count until they could refuse: only then are they taken out. A slot count
    -- without a limit (0) never refuses; 1024 bounds how many linger in any set.
    if limit > 0 and c + 1 > limit or c >= 1024 then
      if released > 0 then redis.call('ZREM', KEYS[k], unpack(ARGV, first, first + released - 1)) end
      redis.call('ZREMRANGEBYSCORE', KEYS[k], '-inf', nowS)
      c = redis.call('ZCARD', KEYS[k])
    end
    k = k + 1
    cnt[i] = c
    if limit > 0 and c + 1 > limit then refusing, v1, v2 = true, 1, 1000000 end
  else
    local bk, lk = KEYS[k], KEYS[k+1]
    k = k + 2
    local sh = redis.call('HMGET', bk, 'spent', 'held', 'sw')
    -- Lapsed reservations are given back once a second (sw: the next sweep, µs), and
    -- before any refusal they could cause.
    if not sh[3] or now >= tonumber(sh[3]) then
      expire_budget(bk, lk, nowS)
      sh = redis.call('HMGET', bk, 'spent', 'held')
      swept[i] = true
    end
    local spent, held = tonumber(sh[1]), tonumber(sh[2] or '0')
    if spent and not swept[i] and spent + held + take > limit then
      expire_budget(bk, lk, nowS)
      held = tonumber(redis.call('HGET', bk, 'held') or '0')
    end
    if not spent and seed >= 0 then
      redis.call('HSET', bk, 'spent', ARGV[a+4])
      set_expiry(bk, ARGV[a+5])
      spent = seed
    end
    if not spent then
      seeding, v1 = true, 2
    else
      spentv[i], heldv[i] = spent, held
      if spent + held + take > limit then
        refusing, v1 = true, 1
        if spent + take <= limit then v2 = held end
      end
    end
  end
  out[2*i], out[2*i+1] = v1, v2
end
if seeding then out[1] = 1; return out end
if refusing then out[1] = 2; return out end
for i = 1, n do
  local a = 5 + (i - 1) * 5
  local kind, limit, take = kinds[i], limits[i], takes[i]
  local key = KEYS[keys[i]]
  if kind == 'r' or kind == 't' then
    local l = lvl[i] - take
    local full = store_level(key, kind, l, limit, now, nowS)
    out[2*i], out[2*i+1] = math.floor(l), full
  elseif kind == 's' then
    redis.call('ZADD', key, deadline, id)
    redis.call('PEXPIRE', key, int(leaseMS + 60000))
    out[2*i], out[2*i+1] = cnt[i] + 1, 0
  else
    local lk = KEYS[keys[i] + 1]
    local held = heldv[i]
    if take > 0 then
      held = held + take
      if swept[i] then
        redis.call('HSET', key, 'held', int(held), 'r:' .. id, ARGV[a+3], 'sw', int(now + 1000000))
      else
        redis.call('HSET', key, 'held', int(held), 'r:' .. id, ARGV[a+3])
      end
      redis.call('ZADD', lk, deadline, id)
      -- Nothing was held: the lease set is new (a set emptied by its last release is
      -- gone, and its expiry with it).
      if heldv[i] == 0 then set_expiry(lk, ARGV[a+5]) end
    end
    -- As read above: the script runs alone, nothing else changed them since.
    out[2*i], out[2*i+1] = spentv[i], held
  end
end
write_rates(now)
return out
`)

// settleScript releases a reservation and adds the cost to each budget's settle period.
// KEYS: per item: r, t and s: one key; b: the reserve period's hash and leases, the settle
// period's hash. ARGV: now µs, request id, addOnly (1: only add), then per item: kind,
// limit, delta (tokens: actual - reserved; requests: -1 to give a request back, sent only
// when a Cluster's sibling scope refused; budget: cost), seed (-1: none; -2: leave an
// absent counter absent), time to live of the settle period's hash (ms, 0: forever).
// Answer: per item two integers: 1 when its settle period's counter is absent and needs
// seeding; and a budget's settle-period spend after the cost, -1 when not counted.
var settleScript = redis.NewScript(luaCommon + `
local nowS, id, addOnly = ARGV[1], ARGV[2], ARGV[3] == '1'
local now = tonumber(nowS)
local n = (#ARGV - 3) / 5
local out = {}
local k = 1
for i = 1, n do
  local a = 3 + (i - 1) * 5
  local kind, limit, delta, seed = ARGV[a+1], tonumber(ARGV[a+2]), tonumber(ARGV[a+3]), tonumber(ARGV[a+4])
  out[2*i-1] = 0
  out[2*i] = -1
  if kind == 't' or kind == 'r' then
    local l = level_of(KEYS[k], kind, limit, now) - delta
    if l > limit then l = limit end
    store_level(KEYS[k], kind, l, limit, now, nowS)
    k = k + 1
  elseif kind == 's' then
    redis.call('ZREM', KEYS[k], id)
    k = k + 1
  else
    local rk, lk, sk = KEYS[k], KEYS[k+1], KEYS[k+2]
    k = k + 3
    -- One read for the reservation and the spend when both are in one hash (the
    -- request settles in the period it was reserved in: nearly always), and then one
    -- write for what it held and what it cost.
    local amt, has
    local released = addOnly
    if not addOnly and rk == sk then
      local v = redis.call('HMGET', rk, 'r:' .. id, 'spent', 'held')
      amt, has = v[1], v[2] ~= false
      if amt and has and delta > 0 then
        local spent = tonumber(v[2]) + delta
        redis.call('HSET', rk, 'held', int(tonumber(v[3] or '0') - tonumber(amt)), 'spent', int(spent))
        redis.call('HDEL', rk, 'r:' .. id)
        redis.call('ZREM', lk, id)
        out[2*i] = spent
        delta, released = 0, true
      end
    elseif not addOnly then
      amt = redis.call('HGET', rk, 'r:' .. id)
    end
    if not released then
      release(rk, lk, id, amt)
    end
    if delta > 0 then
      if has == nil then has = redis.call('HEXISTS', sk, 'spent') == 1 end
      if has then
        out[2*i] = redis.call('HINCRBY', sk, 'spent', ARGV[a+3])
      elseif seed >= 0 then
        redis.call('HSET', sk, 'spent', int(seed + delta))
        set_expiry(sk, ARGV[a+5])
        out[2*i] = seed + delta
      elseif seed == -1 then
        out[2*i-1] = 1
      end
    end
  end
end
write_rates(now)
return out
`)

// peekScript reads each item's standing. KEYS and ARGV as reserveScript's (take and seed
// unused). Answer: per item three integers: buckets: whole units, µs to full; slots: in
// flight; budgets: 1 when counted, spent, held (leases past their deadline left out).
var peekScript = redis.NewScript(luaCommon + `
local nowS = ARGV[1]
local now = tonumber(nowS)
local n = tonumber(ARGV[5])
local out = {}
local k = 1
for i = 1, n do
  local a = 5 + (i - 1) * 5
  local kind, limit = ARGV[a+1], tonumber(ARGV[a+2])
  local v1, v2, v3 = 0, 0, 0
  if kind == 'r' or kind == 't' then
    local l = level_of(KEYS[k], kind, limit, now)
    k = k + 1
    v1, v2 = math.floor(l), math.max(0, math.ceil((limit - l) * minute / limit - 1e-6))
  elseif kind == 's' then
    v1 = redis.call('ZCOUNT', KEYS[k], '(' .. nowS, '+inf')
    k = k + 1
  else
    local bk, lk = KEYS[k], KEYS[k+1]
    k = k + 2
    local spent = redis.call('HGET', bk, 'spent')
    local held = tonumber(redis.call('HGET', bk, 'held') or '0')
    for _, g in ipairs(redis.call('ZRANGEBYSCORE', lk, '-inf', nowS, 'LIMIT', 0, 1000)) do
      held = held - tonumber(redis.call('HGET', bk, 'r:' .. g) or '0')
    end
    if spent then v1, v2 = 1, tonumber(spent) end
    v3 = held
  end
  out[3*i-2], out[3*i-1], out[3*i] = v1, v2, v3
end
return out
`)

// scopeKeys are a scope's key names, made once: a request names each several times.
type scopeKeys struct {
	rate, inflight, budget string // budget: up to the period
	last                   atomic.Pointer[periodKeys]
}

// periodKeys are a budget period's key names.
type periodKeys struct {
	period         Period
	start          int64
	budget, leases string
}

// maxScopeKeys bounds the scopes whose key names are kept; beyond it they start again.
const maxScopeKeys = 10_000

func (rc *redisCounters) keysOf(s Scope) *scopeKeys {
	rc.kmu.RLock()
	k := rc.keys[s]
	rc.kmu.RUnlock()
	if k != nil {
		return k
	}
	tagged := rc.prefix + "{" + s.String() + "}:"
	k = &scopeKeys{rate: tagged + "rate", inflight: tagged + "inflight", budget: tagged + "budget:"}
	rc.kmu.Lock()
	if rc.keys == nil || len(rc.keys) >= maxScopeKeys {
		rc.keys = make(map[Scope]*scopeKeys)
	}
	rc.keys[s] = k
	rc.kmu.Unlock()
	return k
}

func (rc *redisCounters) bucketKey(it *item) string { return rc.keysOf(it.scope).rate }

func (rc *redisCounters) slotKey(it *item) string { return rc.keysOf(it.scope).inflight }

// budgetKeys are the names of its budget hash and leases for the period starting at start.
func (rc *redisCounters) budgetKeys(it *item, start int64) *periodKeys {
	k := rc.keysOf(it.scope)
	if p := k.last.Load(); p != nil && p.period == it.period && p.start == start {
		return p
	}
	b := k.budget + string(it.period) + ":" + strconv.FormatInt(start/1_000_000, 10)
	p := &periodKeys{period: it.period, start: start, budget: b, leases: b + ":leases"}
	k.last.Store(p)
	return p
}

func (rc *redisCounters) budgetKey(it *item, start int64) string {
	return rc.budgetKeys(it, start).budget
}

// ttlMS is how long a budget period's keys live from now: until an hour after the
// period's end plus the lease; 0 (forever) for a total budget. Relative to the
// Limiter's clock, not Redis's, so that both agree on what has ended.
func ttlMS(end, lease, now int64) int64 {
	if end == 0 {
		return 0
	}
	return max((end-now+lease+3_600_000_000)/1000, 1)
}

var kindCodes = [...]string{itemRequests: "r", itemTokens: "t", itemSlot: "s", itemBudget: "b"}

// args are the reserve (and peek) script's keys and arguments for items, the items of
// request id.
func (rc *redisCounters) args(id string, items []item, now, lease int64) ([]string, []any) {
	keys := make([]string, 0, len(items)+2)
	args := make([]any, 0, 6+6*len(items))
	args = append(args, now, id, now+lease, lease/1000, len(items))
	for i := range items {
		it := &items[i]
		var exp int64
		switch it.kind {
		case itemRequests, itemTokens:
			keys = append(keys, rc.bucketKey(it))
		case itemSlot:
			keys = append(keys, rc.slotKey(it))
		case itemBudget:
			bk := rc.budgetKeys(it, it.start)
			keys = append(keys, bk.budget, bk.leases)
			exp = ttlMS(it.end, lease, now)
		}
		args = append(args, kindCodes[it.kind], it.limit, it.take, it.seed, exp)
	}
	return keys, args
}

// slotKeys are the keys of the slot items among items, in order.
func (rc *redisCounters) slotKeys(items []item) []string {
	var out []string
	for i := range items {
		if it := &items[i]; it.kind == itemSlot {
			out = append(out, rc.slotKey(it))
		}
	}
	return out
}

// span is a run of a reservation's items, [lo, hi), that one script decides: all of
// them on one server; one scope's (one check's) in a Cluster.
type span struct{ lo, hi int }

// scopeSpans cuts items into one span per scope (a check's items are contiguous).
func scopeSpans(items []item) []span {
	var out []span
	lo := 0
	for i := 1; i <= len(items); i++ {
		if i == len(items) || items[i].check != items[lo].check {
			out = append(out, span{lo, i})
			lo = i
		}
	}
	return out
}

func (rc *redisCounters) reserve(ctx context.Context, r *Reservation, now, lease int64) (outcome, error) {
	if rc.perScope {
		if spans := scopeSpans(r.items); len(spans) > 1 {
			return rc.reserveEach(ctx, r, spans, now, lease)
		}
	}
	keys, args := rc.args(r.id, r.items, now, lease)
	v, err := rc.exec(ctx, reserveScript, keys, args, rc.slotKeys(r.items)).Int64Slice()
	if err != nil {
		return 0, err
	}
	return readReserve(r.items, v)
}

// reserveEach reserves r in a Cluster: one reserve script per scope, all in one pipeline
// (one round trip to each node holding one of them). Each scope decides alone, so when
// one refuses or needs seeding, the scopes reserved by the same call are released again
// (in a second round trip) before the answer: all or nothing, as on one server, except
// that a request refused by one scope briefly held the others.
func (rc *redisCounters) reserveEach(ctx context.Context, r *Reservation, spans []span, now, lease int64) (outcome, error) {
	parts := make([]*part, len(spans))
	for i, sp := range spans {
		items := r.items[sp.lo:sp.hi]
		keys, args := rc.args(r.id, items, now, lease)
		parts[i] = &part{s: reserveScript, keys: keys, args: args, slotKeys: rc.slotKeys(items)}
	}
	rc.execParts(ctx, parts)
	status := admitted
	var err error
	var reserved []span
	for i, p := range parts {
		sp := spans[i]
		v, e := p.res.Int64Slice()
		var o outcome
		if e == nil {
			o, e = readReserve(r.items[sp.lo:sp.hi], v)
		}
		switch {
		case e != nil:
			err = cmp.Or(err, e)
		case o == admitted:
			reserved = append(reserved, sp)
		case o == needsSeed:
			status = needsSeed
		case status == admitted:
			status = refused
		}
	}
	if (err != nil || status != admitted) && len(reserved) > 0 {
		if e := rc.releaseSpans(ctx, r, reserved, now); e != nil {
			// The caller releases the whole reservation once Redis answers again.
			err = cmp.Or(err, e)
		}
	}
	if err != nil {
		return 0, err
	}
	return status, nil
}

// releaseSpans gives back what the reserve script took for spans of r: the requests and
// tokens from the buckets, the slots, what the budgets hold. Used when a sibling scope
// of a Cluster refused; it does not wait for the request's client, which may have left.
func (rc *redisCounters) releaseSpans(ctx context.Context, r *Reservation, spans []span, now int64) error {
	parts := make([]*part, 0, len(spans))
	for _, sp := range spans {
		keys := make([]string, 0, sp.hi-sp.lo+2)
		args := make([]any, 0, 3+5*(sp.hi-sp.lo))
		args = append(args, now, r.id, "0")
		for i := sp.lo; i < sp.hi; i++ {
			it := &r.items[i]
			switch it.kind {
			case itemRequests, itemTokens:
				if it.take == 0 {
					continue
				}
				keys = append(keys, rc.bucketKey(it))
				args = append(args, kindCodes[it.kind], it.limit, -it.take, 0, 0)
			case itemSlot:
				keys = append(keys, rc.slotKey(it))
				args = append(args, "s", it.limit, 0, 0, 0)
			case itemBudget:
				bk := rc.budgetKeys(it, it.start)
				keys = append(keys, bk.budget, bk.leases, bk.budget)
				args = append(args, "b", it.limit, 0, -2, 0)
			}
		}
		if len(keys) > 0 {
			parts = append(parts, &part{s: settleScript, keys: keys, args: args})
		}
	}
	if len(parts) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rc.callTimeout())
	defer cancel()
	rc.execParts(ctx, parts)
	for _, p := range parts {
		if err := p.res.Err(); err != nil {
			return err
		}
	}
	return nil
}

// readReserve reads the reserve script's answer v into items.
func readReserve(items []item, v []int64) (outcome, error) {
	if len(v) != 1+2*len(items) {
		return 0, fmt.Errorf("reserve script answered %d values for %d items", len(v), len(items))
	}
	status := outcome(v[0])
	for i := range items {
		it := &items[i]
		v1, v2 := v[1+2*i], v[2+2*i]
		switch status {
		case admitted:
			switch it.kind {
			case itemRequests, itemTokens:
				it.after, it.reset = v1, v2
			case itemSlot:
				it.after = v1
			case itemBudget:
				it.after, it.held = v1, v2
			}
		case needsSeed:
			it.needSeed = it.kind == itemBudget && v1 == 2
		case refused:
			it.refused = v1 == 1
			if it.kind == itemBudget {
				it.held = max(v2, 0) // held by requests in flight when only they refuse
			} else {
				it.wait = v2
			}
		default:
			return 0, fmt.Errorf("reserve script answered status %d", v[0])
		}
	}
	return status, nil
}

// settlePart is one settle script call: keys and arguments.
type settlePart struct {
	keys []string
	args []any
}

// settleArgs appends to parts the settle script's calls for r (one, or in a Cluster one
// per scope), and returns them with the items they carry, in order (none: nothing to
// send). Each call answers two values per item it carries, so the answers put end to
// end match sent.
func (rc *redisCounters) settleArgs(parts []settlePart, r *Reservation, tokens, cost, now int64, addOnly, seed bool) ([]settlePart, []int) {
	if rc.perScope {
		var sent []int
		for _, sp := range scopeSpans(r.items) {
			p, s := rc.settleSpan(r, sp, tokens, cost, now, addOnly, seed)
			if len(s) > 0 {
				parts, sent = append(parts, p), append(sent, s...)
			}
		}
		return parts, sent
	}
	p, sent := rc.settleSpan(r, span{0, len(r.items)}, tokens, cost, now, addOnly, seed)
	if len(sent) == 0 {
		return parts, nil
	}
	return append(parts, p), sent
}

// settleSpan is the settle script's call for the items of sp.
func (rc *redisCounters) settleSpan(r *Reservation, sp span, tokens, cost, now int64, addOnly, seed bool) (settlePart, []int) {
	n := sp.hi - sp.lo
	keys := make([]string, 0, n+4)
	args := make([]any, 0, 3+5*n)
	flag := "0"
	if addOnly {
		flag = "1"
	}
	args = append(args, now, r.id, flag)
	sent := make([]int, 0, n)
	for i := sp.lo; i < sp.hi; i++ {
		it := &r.items[i]
		if addOnly && !(it.kind == itemBudget && it.needSeed) {
			continue
		}
		switch it.kind {
		case itemRequests:
			continue
		case itemTokens:
			delta := tokens - it.take
			if delta == 0 {
				continue
			}
			keys = append(keys, rc.bucketKey(it))
			args = append(args, "t", it.limit, delta, 0, 0)
		case itemSlot:
			keys = append(keys, rc.slotKey(it))
			args = append(args, "s", it.limit, 0, 0, 0)
		case itemBudget:
			it.needSeed = false
			bk := rc.budgetKeys(it, it.start)
			keys = append(keys, bk.budget, bk.leases, rc.budgetKey(it, it.settleStart))
			s := it.settleSeed
			if s < 0 && !seed {
				s = -2
			}
			args = append(args, "b", it.limit, cost, s, ttlMS(it.settleEnd, r.l.lease, now))
		}
		sent = append(sent, i)
	}
	return settlePart{keys: keys, args: args}, sent
}

// settleResult reads the settle script's answer into r's items.
func settleResult(r *Reservation, sent []int, v []int64) {
	for j, i := range sent {
		if 2*j+1 >= len(v) {
			break
		}
		if v[2*j] == 1 {
			r.items[i].needSeed = true
		}
		if r.items[i].kind == itemBudget && v[2*j+1] >= 0 {
			r.items[i].spent = v[2*j+1]
		}
	}
}

func (rc *redisCounters) settle(ctx context.Context, r *Reservation, tokens, cost, now int64, addOnly, seed bool) error {
	sp, sent := rc.settleArgs(nil, r, tokens, cost, now, addOnly, seed)
	if len(sent) == 0 {
		return nil
	}
	var v []int64
	if len(sp) == 1 {
		var err error
		if v, err = settleScript.Run(ctx, rc.c, sp[0].keys, sp[0].args...).Int64Slice(); err != nil {
			return err
		}
	} else {
		parts := make([]*part, len(sp))
		for i := range sp {
			parts[i] = &part{s: settleScript, keys: sp[i].keys, args: sp[i].args}
		}
		rc.execParts(ctx, parts)
		for _, p := range parts {
			pv, err := p.res.Int64Slice()
			if err != nil {
				return err
			}
			v = append(v, pv...)
		}
	}
	settleResult(r, sent, v)
	return nil
}

func (rc *redisCounters) peek(ctx context.Context, r *Reservation, now int64) error {
	// Status peeks at one check: one scope, one slot.
	keys, args := rc.args(r.id, r.items, now, r.l.lease)
	// A standing reflects every settlement this gateway has made: wait for those on
	// their way, and send the queued ones ahead of the peek.
	rc.sending.Lock()
	rc.sending.Unlock() //nolint:staticcheck // an empty section: waiting is the point
	v, err := rc.exec(ctx, peekScript, keys, args, nil).Int64Slice()
	if err != nil {
		return err
	}
	if len(v) != 3*len(r.items) {
		return fmt.Errorf("peek script answered %d values for %d items", len(v), len(r.items))
	}
	for i := range r.items {
		it := &r.items[i]
		v1, v2, v3 := v[3*i], v[3*i+1], v[3*i+2]
		switch it.kind {
		case itemRequests, itemTokens:
			it.after, it.reset = v1, v2
		case itemSlot:
			it.after = v1
		case itemBudget:
			it.held = max(v3, 0)
			switch {
			case v1 == 1:
				it.after = v2
			case it.seed >= 0:
				it.after = it.seed
			default:
				it.needSeed = true
			}
		}
	}
	return nil
}

// maxRelease bounds the reservations kept for release after an outage; the others lapse
// with their lease.
const maxRelease = 10_000

// markStale notes what to put right when Redis answers again: with spend, that the
// spend of r's budgets was counted without it (their settle periods' counters are then
// seeded again from the ledger); without counterOnly, that r's reservation may still be
// held there (released then, by a copy of r, so that r itself may go on being used).
func (rc *redisCounters) markStale(r *Reservation, spend, counterOnly bool) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if spend {
		if rc.stale == nil {
			rc.stale = make(map[string]struct{})
		}
		for i := range r.items {
			it := &r.items[i]
			if it.kind == itemBudget {
				rc.stale[rc.budgetKey(it, it.settleStart)] = struct{}{}
			}
		}
	}
	if !counterOnly && len(rc.release) < maxRelease {
		c := &Reservation{l: r.l, id: r.id, tokens: r.tokens}
		c.items = append([]item(nil), r.items...)
		for i := range c.items {
			c.items[i].ms = nil
		}
		rc.release = append(rc.release, c)
	}
}

// resync runs when Redis answers again: it releases the reservations that could not be
// released, then drops the spend of the budget periods counted elsewhere meanwhile, so
// that the next reservation seeds them from the ledger. With nothing to do it is a PING.
func (rc *redisCounters) resync(ctx context.Context) error {
	if cc, ok := rc.c.(*redis.ClusterClient); ok {
		// A Cluster client learns that a master was replaced only when a live node
		// answers MOVED, or once a minute: a dead one answers nothing. Ask again
		// which node serves which slots (in the background, at most one at a time).
		cc.ReloadState(ctx)
	}
	rc.mu.Lock()
	release, stale := rc.release, rc.stale
	rc.release, rc.stale = nil, nil
	rc.mu.Unlock()
	var err error
	if len(release) == 0 && len(stale) == 0 {
		err = rc.c.Ping(ctx).Err()
	}
	for i, r := range release {
		if err != nil {
			rc.requeue(release[i:], nil)
			break
		}
		for j := range r.items {
			r.items[j].needSeed = false
		}
		err = rc.settle(ctx, r, r.tokens, 0, 0, false, false)
		if err != nil {
			rc.requeue(release[i:], nil)
		}
	}
	if len(stale) > 0 {
		if err == nil {
			pipe := rc.c.Pipeline()
			for k := range stale {
				pipe.HDel(ctx, k, "spent")
			}
			_, err = pipe.Exec(ctx)
		}
		if err != nil {
			rc.requeue(nil, stale)
		}
	}
	if err != nil && !errors.Is(err, redis.Nil) {
		return err
	}
	return nil
}

// requeue keeps what a resync could not put right for the next one. The reservations
// noted while it ran come after those it gave back, and together they stay within
// maxRelease: a Redis that fails every resync while requests go on would otherwise grow
// the list by up to maxRelease each time, until the process runs out of memory.
func (rc *redisCounters) requeue(release []*Reservation, stale map[string]struct{}) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if len(release) > 0 {
		release = release[:min(len(release), maxRelease)]
		rc.release = append(release, rc.release[:min(len(rc.release), maxRelease-len(release))]...)
	}
	if len(stale) > 0 && rc.stale == nil {
		rc.stale = make(map[string]struct{})
	}
	for k := range stale {
		rc.stale[k] = struct{}{}
	}
}

func (rc *redisCounters) close() error {
	rc.qmu.Lock()
	rc.closed = true
	stop := rc.stop
	rc.qmu.Unlock()
	if stop != nil {
		close(stop)
		<-rc.flusherDone
	}
	// What is still queued goes now: a gateway that stops leaves no slot or spend behind.
	rc.flushOut()
	return nil
}
