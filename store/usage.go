package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/switchyard-gw/switchyard/metering"
)

// The usage ledger's side in the database: metering.Ledger journals every metered
// request locally and hands the journal to WriteUsage in batches; QueryUsage sums what
// was stored. The tables are created by migration 0002_usage.

var (
	_ metering.Sink   = (*Store)(nil)
	_ metering.Reader = (*Store)(nil)
)

// WriteUsage implements metering.Sink. In one transaction it inserts the records whose
// request ids are not stored yet, and raises journalID's position to upTo. A record
// already stored (a batch replayed after a crash, or the same request twice in a batch)
// is skipped, not updated. The position only moves forward: an upTo below the stored
// one leaves it as it is.
//
// Either the whole batch and the position are stored, or nothing is. When the database
// refuses a row for what it holds (a constraint or data error), the error wraps
// metering.ErrRecordRefused, and the ledger splits the batch to set that record aside;
// any other error (no connection, a database taking no writes) leaves the batch in the
// journal to be tried again. A record with no RequestID or no Time is refused (it could
// not be deduplicated, or would fall on no day): a NULL in a NOT NULL column.
//
// Times are stored in UTC to the microsecond; an empty KeyID or ProjectID is stored as
// NULL.
func (s *Store) WriteUsage(ctx context.Context, journalID string, upTo int64, records []metering.Record) error {
	if journalID == "" {
		return errors.New("store: write usage: empty journal id")
	}
	err := call0(ctx, s, kindWrite, func(b backend) error {
		err := b.writeUsage(ctx, journalID, upTo, records, time.Now())
		if err != nil && rowRefusal(err) {
			// The database refused a row for what it holds: tell the ledger, which
			// splits the batch to find it and sets only that record aside.
			err = fmt.Errorf("%w: %w", metering.ErrRecordRefused, err)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("store: write usage (%d records, journal %s up to %d): %w", len(records), journalID, upTo, err)
	}
	return nil
}

// JournalPosition implements metering.Sink: how far journalID has been written, 0 for a
// journal never written.
func (s *Store) JournalPosition(ctx context.Context, journalID string) (int64, error) {
	pos, err := call(ctx, s, kindRead, func(b backend) (int64, error) { return b.journalPosition(ctx, journalID) })
	if err != nil {
		return 0, fmt.Errorf("store: journal position of %s: %w", journalID, err)
	}
	return pos, nil
}

// QueryUsage implements metering.Reader. It keeps the records with From <= time < To
// (a zero bound is no bound) and, when set, q.KeyID's, q.Model's and those of q.Owner's
// keys, and sums them by q.GroupBy: any of "day" (the record's UTC calendar day,
// YYYY-MM-DD), "key", "model", "candidate", "channel" and "owner" (the key's owner),
// each at most once, in the order given. The rows come ordered by those
// columns in that order, strings compared byte by byte; a request that had no key has
// KeyID "". Without GroupBy the answer is one row of totals, zeros when nothing
// matched.
func (s *Store) QueryUsage(ctx context.Context, q metering.Query) ([]metering.Row, error) {
	var d *usageDialect
	switch s.driver {
	case DriverPostgres:
		d = pgUsageDialect
	default:
		d = sqliteUsageDialect
	}
	uq, err := buildUsageQuery(d, q)
	if err != nil {
		return nil, err
	}
	rows, err := call(ctx, s, kindRead, func(b backend) ([]metering.Row, error) { return b.queryUsage(ctx, uq) })
	if err != nil {
		return nil, fmt.Errorf("store: query usage: %w", err)
	}
	return rows, nil
}

// usageColumns are usage_records' columns in the order the backends bind them.
const usageColumns = `request_id, key_id, model, candidate, protocol, operation, status, ` +
	`input, cached_input, cache_write, output, reasoning, estimated, ` +
	`cost_micros, latency_ms, ttfb_ms, attempts, ts, project_id, channel, ` +
	`outcome, refused_by, tries, tool_uses`

const usageColumnCount = 24

// The dimensions a usage query can group by.
const (
	dimDay       = "day"
	dimKey       = "key"
	dimModel     = "model"
	dimCandidate = "candidate"
	dimChannel   = "channel"
	dimOwner     = "owner"
)

// usageDialect is what differs between the databases in a usage query. Expressions are
// SQL over usage_records' columns.
type usageDialect struct {
	// param is the placeholder of the n-th argument (from 1).
	param func(n int) string
	// time is a time bound as the database compares it with ts.
	time func(t time.Time) any
	// dayGroup is the record's UTC day in a form cheap to group and order by;
	// daySelect turns it into YYYY-MM-DD text (it may use dayGroup, which is grouped).
	dayGroup, daySelect string
	// key, model, candidate, channel and owner are the columns to group and order by:
	// a missing key or owner as '', and ordered byte by byte whatever the database's
	// collation. owner is api_keys.owner_id of the record's key, joined as owner_key.
	key, model, candidate, channel, owner string
	// ownerKeys keeps the records of one owner's keys; %s is the owner's placeholder.
	ownerKeys string
}

// ownerJoin brings each record's key's owner to a usage query grouped by owner. The
// ledger keeps no owner: a key's owner is read where it is kept, so the hot write path
// stays as it was and a key's records follow its owner. A LEFT JOIN: a key from the
// configuration, or no key, has no row and groups under "". None of usage_records'
// columns that a usage query names is also a column of api_keys, so they stay
// unqualified.
const ownerJoin = ` LEFT JOIN api_keys AS owner_key ON owner_key.id = usage_records.key_id`

// usageQuery is a usage query ready to run: its SQL, arguments, and the dimensions its
// first columns hold.
type usageQuery struct {
	sql  string
	args []any
	dims []string
}

// The sums every usage row has, after its dimensions, in scanUsageRow's order. The
// casts keep PostgreSQL's sum of bigints (a numeric) a bigint, as SQLite's already is.
const usageSums = `count(*), ` +
	`CAST(coalesce(sum(input), 0) AS BIGINT), ` +
	`CAST(coalesce(sum(cached_input), 0) AS BIGINT), ` +
	`CAST(coalesce(sum(cache_write), 0) AS BIGINT), ` +
	`CAST(coalesce(sum(output), 0) AS BIGINT), ` +
	`CAST(coalesce(sum(reasoning), 0) AS BIGINT), ` +
	`CAST(coalesce(sum(cost_micros), 0) AS BIGINT), ` +
	`count(*) FILTER (WHERE estimated)`

// buildUsageQuery checks q and writes it in d's dialect.
func buildUsageQuery(d *usageDialect, q metering.Query) (usageQuery, error) {
	uq := usageQuery{}
	var selects, groups []string
	seen := map[string]bool{}
	for _, dim := range q.GroupBy {
		if seen[dim] {
			return uq, fmt.Errorf("store: query usage: %q appears twice in GroupBy", dim)
		}
		seen[dim] = true
		switch dim {
		case dimDay:
			selects, groups = append(selects, d.daySelect), append(groups, d.dayGroup)
		case dimKey:
			selects, groups = append(selects, d.key), append(groups, d.key)
		case dimModel:
			selects, groups = append(selects, d.model), append(groups, d.model)
		case dimCandidate:
			selects, groups = append(selects, d.candidate), append(groups, d.candidate)
		case dimChannel:
			selects, groups = append(selects, d.channel), append(groups, d.channel)
		case dimOwner:
			selects, groups = append(selects, d.owner), append(groups, d.owner)
		default:
			return uq, fmt.Errorf("store: query usage: cannot group by %q (want %q, %q, %q, %q, %q or %q)", dim,
				dimDay, dimKey, dimModel, dimCandidate, dimChannel, dimOwner)
		}
		uq.dims = append(uq.dims, dim)
	}
	var where []string
	arg := func(v any) string {
		uq.args = append(uq.args, v)
		return d.param(len(uq.args))
	}
	// The bounds are rounded up to the microsecond: a stored time t (whole
	// microseconds) is >= From exactly when it is >= From rounded up, and the same
	// for < To.
	if !q.From.IsZero() {
		where = append(where, "ts >= "+arg(d.time(ceilMicro(q.From))))
	}
	if !q.To.IsZero() {
		where = append(where, "ts < "+arg(d.time(ceilMicro(q.To))))
	}
	// Only served answers are usage: a refused or failed request is in the ledger
	// for the request log, and costs and counts nothing.
	where = append(where, "outcome = 'served'")
	// The bare columns, so that the indexes on (key_id, ts) and (ts) apply.
	if q.KeyID != "" {
		where = append(where, "key_id = "+arg(q.KeyID))
	}
	if q.Model != "" {
		where = append(where, "model = "+arg(q.Model))
	}
	// One owner's keys through api_keys_by_owner, then their records through
	// usage_records_by_key_ts.
	if q.Owner != "" {
		where = append(where, fmt.Sprintf(d.ownerKeys, arg(q.Owner)))
	}

	var sb strings.Builder
	sb.WriteString("SELECT ")
	for _, s := range selects {
		sb.WriteString(s)
		sb.WriteString(", ")
	}
	sb.WriteString(usageSums)
	sb.WriteString(" FROM usage_records")
	if seen[dimOwner] {
		sb.WriteString(ownerJoin)
	}
	if len(where) > 0 {
		sb.WriteString(" WHERE ")
		sb.WriteString(strings.Join(where, " AND "))
	}
	if len(groups) > 0 {
		g := strings.Join(groups, ", ")
		sb.WriteString(" GROUP BY ")
		sb.WriteString(g)
		sb.WriteString(" ORDER BY ")
		sb.WriteString(g)
	}
	uq.sql = sb.String()
	return uq, nil
}

// scanUsageRow reads one row of a usageQuery.
func scanUsageRow(scan func(...any) error, dims []string) (metering.Row, error) {
	var r metering.Row
	dest := make([]any, 0, len(dims)+8)
	for _, dim := range dims {
		switch dim {
		case dimDay:
			dest = append(dest, &r.Day)
		case dimKey:
			dest = append(dest, &r.KeyID)
		case dimModel:
			dest = append(dest, &r.Model)
		case dimCandidate:
			dest = append(dest, &r.Candidate)
		case dimChannel:
			dest = append(dest, &r.Channel)
		case dimOwner:
			dest = append(dest, &r.Owner)
		}
	}
	dest = append(dest, &r.Requests, &r.Input, &r.CachedIn, &r.CacheWrite, &r.Output, &r.Reasoning, &r.CostMicros, &r.Estimated)
	err := scan(dest...)
	return r, err
}

// channelOf is the channel a record is stored under: journal lines written before
// channels existed have none, and came through the family's own API.
func channelOf(r *metering.Record) string {
	if r.Channel == "" {
		return "api"
	}
	return r.Channel
}

// ceilMicro rounds t up to a whole microsecond, in UTC.
func ceilMicro(t time.Time) time.Time {
	u := t.Truncate(time.Microsecond)
	if u.Before(t) {
		u = u.Add(time.Microsecond)
	}
	return u.UTC()
}

// numberedParam is a placeholder both databases accept: ?N for SQLite, $N for
// PostgreSQL.
func numberedParam(prefix string) func(int) string {
	return func(n int) string { return prefix + strconv.Itoa(n) }
}

// outcomeOf is the outcome a record is stored under.
func outcomeOf(r *metering.Record) string {
	if r.Outcome == "" {
		return metering.OutcomeServed
	}
	return r.Outcome
}

// toolUsesOf is a record's server tool uses as the tool_uses column keeps them: JSON,
// or NULL for none.
func toolUsesOf(r *metering.Record) (string, bool) {
	if r.ToolUses.IsZero() {
		return "", false
	}
	return string(r.ToolUses.AppendJSON(nil)), true
}

// triesOf is a record's attempts as the tries column keeps them: JSON, or NULL.
func triesOf(r *metering.Record) (string, bool) {
	if len(r.Tries) == 0 {
		return "", false
	}
	b, err := json.Marshal(r.Tries)
	if err != nil {
		return "", false // plain strings and integers: never fails
	}
	return string(b), true
}
