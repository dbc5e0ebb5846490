package limits

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// A lease is allowance a gateway takes from a counter in Redis in one call and spends in
// its memory (lease.go). It lives in the counters exact mode uses, so that gateways of
// both modes share one limit:
//
//	bucket (r, t)  the units are taken from the bucket's level; given back, added again
//	slots (s)      members <gateway id>:1..n of the scope's slot set, with a deadline
//	budget (b)     the field r:<gateway id> of the period's hash (counted in held), and
//	               the gateway id in its leases set, with a deadline
//
// The gateway id starts "L:". A lease whose deadline passes (its gateway died) is swept
// like a request's reservation; a budget lease swept so drops the period's spend, which
// the next request then seeds from the ledger, since its gateway had spent some of it
// without adding it yet.

// leaseFraction is the share of what remains after a request that a lease may hold
// beyond that request: an eighth, in whole requests like the one that asked.
const leaseFraction = 8

// leaseScript takes, resizes or gives back one lease per op.
// KEYS per op: r/t: the bucket hash; s: the slot set; b: the budget hash and its leases.
// ARGV: now µs, gateway id, deadline µs, slot set life ms, the number of ops n, then per
// op 8 values: kind, limit, need, desired (the most to hold beyond need), give, keep,
// seed, last:
//
//	r/t: give: units given back (negative: tokens used past the lease, taken now)
//	s:   keep: this gateway's requests in flight; last: the highest member number it may
//	     have in the set
//	b:   give: spend to add (to a counter that is absent, only with a seed); keep: what the lease keeps besides need (requests in
//	     flight, allowance not given back); seed: the ledger's spend (-1: none); last:
//	     the time to live of the budget keys, ms (0: forever)
//
// Answer per op, four integers: status (0 granted, 1 refused, 2 a budget that needs
// seeding, nothing changed), granted (need and the extra: the lease's new size beyond
// keep), and r/t: whole units left, µs to full (refused: µs until need fits, -1 never);
// s: the set's count after; b: spent, held (refused: what requests in flight hold when
// only they stand in the way, else 0).
var leaseScript = redis.NewScript(luaCommon + `
local nowS, gw, deadline, slotMS = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
local now = tonumber(nowS)
local n = tonumber(ARGV[5])
local out = {}
local k = 1
-- extra is what a lease holds beyond need: an eighth of what is left after it, in whole
-- needs, at most desired; none when less than nine needs are left.
local function extra(room, need, desired)
  if need <= 0 or room <= need then return 0 end
  local e = math.floor((room - need) / ` + strconv.Itoa(leaseFraction) + ` / need) * need
  if e > desired then e = desired end
  if e < 0 then e = 0 end
  return e
end
for i = 1, n do
  local a = 5 + (i - 1) * 8
  local kind, limit, need, desired = ARGV[a+1], tonumber(ARGV[a+2]), tonumber(ARGV[a+3]), tonumber(ARGV[a+4])
  local give, keep, seed, last = tonumber(ARGV[a+5]), tonumber(ARGV[a+6]), tonumber(ARGV[a+7]), tonumber(ARGV[a+8])
  local st, g, v1, v2 = 0, 0, 0, 0
  if kind == 'r' or kind == 't' then
    local key = KEYS[k]
    k = k + 1
    local l = level_of(key, kind, limit, now) + give
    if l > limit then l = limit end
    if need > l then
      st = 1
      if need > limit then v2 = -1 else v2 = math.ceil((need - l) * minute / limit - 1e-6) end
      if give ~= 0 then store_level(key, kind, l, limit, now, nowS) end
      v1 = math.floor(l)
    else
      g = need + extra(l, need, desired)
      l = l - g
      if give ~= 0 or g ~= 0 then
        v2 = store_level(key, kind, l, limit, now, nowS)
      else
        v2 = math.max(0, math.ceil((limit - l) * minute / limit - 1e-6))
      end
      v1 = math.floor(l)
    end
  elseif kind == 's' then
    local key = KEYS[k]
    k = k + 1
    local mine = 0
    if last > 0 then
      local names = {}
      for j = 1, last do names[j] = gw .. ':' .. j end
      for _, sc in ipairs(redis.call('ZMSCORE', key, unpack(names))) do
        if sc then mine = mine + 1 end
      end
    end
    local c = redis.call('ZCARD', key)
    local others = c - mine
    if need > 0 and keep + need > limit - others then
      redis.call('ZREMRANGEBYSCORE', key, '-inf', nowS)
      others = redis.call('ZCARD', key) - mine
    end
    local size = keep
    if need > 0 and keep + need > limit - others then
      st, v2 = 1, 1000000
    else
      g = need + extra(limit - others - keep, need, desired)
      size = keep + g
    end
    if size > 0 then
      local zargs = {}
      for j = 1, size do
        zargs[2*j-1] = deadline
        zargs[2*j] = gw .. ':' .. j
      end
      redis.call('ZADD', key, unpack(zargs))
      redis.call('PEXPIRE', key, int(slotMS + 60000))
    end
    if last > size then
      local gone = {}
      for j = size + 1, last do gone[#gone + 1] = gw .. ':' .. j end
      redis.call('ZREM', key, unpack(gone))
    end
    v1 = others + size
  else
    local bk, lk = KEYS[k], KEYS[k+1]
    k = k + 2
    local sh = redis.call('HMGET', bk, 'sw')
    if not sh[1] or now >= tonumber(sh[1]) then
      expire_budget(bk, lk, nowS)
      redis.call('HSET', bk, 'sw', int(now + 1000000))
    end
    sh = redis.call('HMGET', bk, 'spent', 'held', 'r:' .. gw)
    local spent, held, mine = tonumber(sh[1]), tonumber(sh[2] or '0'), tonumber(sh[3] or '0')
    if not spent and seed >= 0 then
      spent = seed
      redis.call('HSET', bk, 'spent', int(seed))
      set_expiry(bk, ARGV[a+8])
    end
    if not spent and (need > 0 or give > 0) then
      st = 2
    else
      if spent then spent = spent + give end
      local others = held - mine
      local size = keep
      if spent then
        local room = limit - spent - others - keep
        if need > room then
          st = 1
          if spent + need <= limit then v2 = others + keep end
        else
          g = need + extra(room, need, desired)
          size = keep + g
        end
        redis.call('HSET', bk, 'spent', int(spent))
      end
      held = others + size
      if size > 0 then
        redis.call('HSET', bk, 'held', int(held), 'r:' .. gw, int(size))
        redis.call('ZADD', lk, deadline, gw)
        set_expiry(lk, ARGV[a+8])
      elseif mine > 0 then
        redis.call('HSET', bk, 'held', int(held))
        redis.call('HDEL', bk, 'r:' .. gw)
        redis.call('ZREM', lk, gw)
      end
      if st == 0 then v1, v2 = spent or -1, held else v1 = spent or -1 end
    end
  end
  out[4*i-3], out[4*i-2], out[4*i-1], out[4*i] = st, g, v1, v2
end
write_rates(now)
return out
`)

// maxOpsPerCall bounds the ops of one leaseScript call.
const maxOpsPerCall = 128

// leaseOp is one lease to take, resize or give back, and its answer.
type leaseOp struct {
	o                      *leaseObj
	need, desired          int64
	give, keep, seed, last int64
	// Answer.
	status     int64
	granted    int64
	v1, v2     int64
	sentUnused int64 // what the call took out of unused, to put back if nothing changed
}

// leaseArgs are the keys and arguments of one leaseScript call carrying ops.
func (rc *redisCounters) leaseArgs(gw string, ops []*leaseOp, now, life int64) ([]string, []any) {
	keys := make([]string, 0, len(ops)*2)
	args := make([]any, 0, 5+8*len(ops))
	args = append(args, now, gw, now+life, life/1000, len(ops))
	for _, op := range ops {
		o := op.o
		last := op.last
		switch o.key.kind {
		case itemRequests, itemTokens:
			keys = append(keys, rc.keysOf(o.key.scope).rate)
		case itemSlot:
			keys = append(keys, rc.keysOf(o.key.scope).inflight)
		case itemBudget:
			it := item{scope: o.key.scope, period: o.key.period}
			bk := rc.budgetKeys(&it, o.key.start)
			keys = append(keys, bk.budget, bk.leases)
			last = ttlMS(o.key.end, life, now)
		}
		args = append(args, kindCodes[o.key.kind], o.key.limit, op.need, op.desired, op.give, op.keep, op.seed, last)
	}
	return keys, args
}

// renew sends ops (and says in how many calls), grouped so that each call touches one
// scope's keys when the client is a cluster's (one slot each), else in one call; the
// calls go through execParts, so they carry the queued settlements and share pipelines
// with other calls.
func (rc *redisCounters) renew(ctx context.Context, gw string, ops []*leaseOp, now, life int64) (calls int, err error) {
	groups := [][]*leaseOp{ops}
	if rc.perScope && len(ops) > 1 {
		groups = groups[:0]
		byScope := make(map[Scope]int)
		for _, op := range ops {
			i, ok := byScope[op.o.key.scope]
			if !ok {
				i = len(groups)
				byScope[op.o.key.scope] = i
				groups = append(groups, nil)
			}
			groups[i] = append(groups[i], op)
		}
	}
	// A call carries at most maxOpsPerCall ops: an upkeep of many leases must not hold
	// Redis's one thread for long.
	for i := 0; i < len(groups); i++ {
		if g := groups[i]; len(g) > maxOpsPerCall {
			groups = append(groups, g[maxOpsPerCall:])
			groups[i] = g[:maxOpsPerCall]
		}
	}
	// Every call in one pipeline (execParts): one round trip, whichever nodes they go to.
	parts := make([]*part, len(groups))
	for i, g := range groups {
		keys, args := rc.leaseArgs(gw, g, now, life)
		parts[i] = &part{s: leaseScript, keys: keys, args: args}
	}
	rc.execParts(ctx, parts)
	for i, g := range groups {
		v, err := parts[i].res.Int64Slice()
		if err == nil && len(v) != 4*len(g) {
			err = fmt.Errorf("lease script answered %d values for %d ops", len(v), len(g))
		}
		if err != nil {
			return len(groups), err
		}
		for j, op := range g {
			op.status, op.granted, op.v1, op.v2 = v[4*j], v[4*j+1], v[4*j+2], v[4*j+3]
		}
	}
	return len(groups), nil
}
