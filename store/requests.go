package store

import (
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/switchyard-gw/switchyard/metering"
)

// The request log reads the ledger's rows (usage_records) newest first, a page at a
// time. Pages are keyset pages: a cursor is the (ts, request_id) of the last row shown,
// and the next page is the rows below it in the index that ends in (ts, request_id)
// (migration 0005), so a page costs the same at the millionth row as at the first,
// and rows written meanwhile never shift a page.

var _ metering.RequestLog = (*Store)(nil)

// maxCursor bounds a cursor's length before it is decoded.
const maxCursor = 512

// requestSelect is the log row's columns; every one scans into an int64 or a
// sql.NullString on both databases (requestDialect turns ts and estimated into
// integers).
const requestSelectTail = `u.request_id, u.key_id, k.name, u.project_id, u.model, u.candidate, u.operation, ` +
	`u.status, u.ttfb_ms, u.latency_ms, u.input, u.output, u.cost_micros, u.outcome, u.refused_by, ` +
	`u.tries, u.attempts, u.tool_uses`

// ListRequests implements metering.RequestLog: the records matching q, newest first
// (ties by request id, descending), at most q.Limit of them (50 when unset,
// metering.MaxRequestPage at most). The key's name comes from api_keys, or from the id
// of a key of the configuration ("static:<name>"); never anything secret.
func (s *Store) ListRequests(ctx context.Context, q metering.RequestQuery) (metering.RequestPage, error) {
	query, args, limit, err := buildRequestQuery(s.driver, q)
	if err != nil {
		return metering.RequestPage{}, err
	}
	rows, err := call(ctx, s, kindRead, func(b backend) ([]metering.RequestRow, error) {
		return b.listRequests(ctx, query, args)
	})
	if err != nil {
		return metering.RequestPage{}, fmt.Errorf("store: list requests: %w", err)
	}
	page := metering.RequestPage{Requests: rows}
	if len(rows) > limit {
		page.Requests = rows[:limit]
		last := page.Requests[limit-1]
		page.Next = encodeCursor(last.Time, last.RequestID)
	}
	return page, nil
}

// buildRequestQuery writes ListRequests' query in driver's dialect. It asks for one row
// more than the page, which tells whether another page follows.
func buildRequestQuery(driver string, q metering.RequestQuery) (query string, args []any, limit int, err error) {
	d := sqliteUsageDialect
	tsExpr, estExpr := `u.ts`, `u.estimated`
	if driver == DriverPostgres {
		d = pgUsageDialect
		tsExpr, estExpr = `CAST(extract(epoch FROM u.ts) * 1000000 AS BIGINT)`, `CASE WHEN u.estimated THEN 1 ELSE 0 END`
	}
	limit = q.Limit
	if limit <= 0 {
		limit = 50
	}
	limit = min(limit, metering.MaxRequestPage)
	arg := func(v any) string {
		args = append(args, v)
		return d.param(len(args))
	}
	var where []string
	for _, f := range []struct{ col, v string }{
		{"u.key_id", q.KeyID}, {"u.project_id", q.ProjectID}, {"u.model", q.Model}, {"u.candidate", q.Candidate},
	} {
		if f.v != "" {
			where = append(where, f.col+" = "+arg(f.v))
		}
	}
	if q.Status != 0 {
		where = append(where, "u.status = "+arg(int64(q.Status)))
	}
	if !q.Since.IsZero() {
		where = append(where, "u.ts >= "+arg(d.time(ceilMicro(q.Since))))
	}
	if !q.Until.IsZero() {
		where = append(where, "u.ts < "+arg(d.time(ceilMicro(q.Until))))
	}
	if q.After != "" {
		at, id, err := decodeCursor(q.After)
		if err != nil {
			return "", nil, 0, err
		}
		// A row value, which both databases compare on the index in one range.
		where = append(where, "(u.ts, u.request_id) < ("+arg(d.time(at))+", "+arg(id)+")")
	}
	var sb strings.Builder
	sb.WriteString("SELECT " + tsExpr + ", " + estExpr + ", " + requestSelectTail +
		" FROM usage_records u LEFT JOIN api_keys k ON k.id = u.key_id")
	if len(where) > 0 {
		sb.WriteString(" WHERE " + strings.Join(where, " AND "))
	}
	sb.WriteString(" ORDER BY u.ts DESC, u.request_id DESC LIMIT " + strconv.Itoa(limit+1))
	return sb.String(), args, limit, nil
}

// scanRequestRow reads one row of ListRequests' query.
func scanRequestRow(scan func(...any) error) (metering.RequestRow, error) {
	var (
		r                                                  metering.RequestRow
		ts, estimated, status, attempts                    int64
		keyID, keyName, projectID, candidate, refused, try sql.NullString
		toolUses                                           sql.NullString
	)
	err := scan(&ts, &estimated, &r.RequestID, &keyID, &keyName, &projectID, &r.Model, &candidate, &r.Operation,
		&status, &r.TTFBMs, &r.DurationMs, &r.Input, &r.Output, &r.CostMicros, &r.Outcome, &refused, &try, &attempts, &toolUses)
	if err != nil {
		return r, err
	}
	r.Time = time.UnixMicro(ts).UTC()
	r.Estimated = estimated != 0
	r.Status, r.Attempts = int(status), int(attempts)
	r.KeyID, r.KeyName, r.ProjectID, r.Candidate, r.RefusedBy = keyID.String, keyName.String, projectID.String, candidate.String, refused.String
	if r.KeyName == "" {
		r.KeyName, _ = strings.CutPrefix(r.KeyID, "static:")
		if r.KeyName == r.KeyID {
			r.KeyName = "" // neither a stored key nor one of the configuration: no name
		}
	}
	r.Tries = []metering.Try{}
	if try.Valid {
		// Written by this store from metering.Try: a row that does not decode shows
		// no attempts rather than failing the page.
		_ = json.Unmarshal([]byte(try.String), &r.Tries)
	}
	if toolUses.Valid {
		_ = r.ToolUses.UnmarshalJSON([]byte(toolUses.String)) // never fails
	}
	r.Flags()
	return r, nil
}

// encodeCursor makes the opaque cursor of a row: its time in Unix microseconds and its
// request id.
func encodeCursor(t time.Time, requestID string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(t.UnixMicro(), 10) + "." + requestID))
}

func decodeCursor(c string) (time.Time, string, error) {
	if len(c) > maxCursor {
		return time.Time{}, "", metering.ErrBadCursor
	}
	raw, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return time.Time{}, "", metering.ErrBadCursor
	}
	micros, id, ok := strings.Cut(string(raw), ".")
	n, err := strconv.ParseInt(micros, 10, 64)
	if !ok || err != nil || id == "" {
		return time.Time{}, "", metering.ErrBadCursor
	}
	return time.UnixMicro(n).UTC(), id, nil
}
