package alerts

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"time"
)

// Delivery states, as the outbox stores them.
const (
	StatePending = "pending" // waiting for its first try or a retry
	StateSent    = "sent"    // the receiver answered 2xx
	StateFailed  = "failed"  // given up: too many tries or too old
)

// NewDelivery is one event for one webhook, to be stored.
type NewDelivery struct {
	Webhook string // Webhook.ID
	Dedupe  string // Event.DedupeKey: a second row with the same Webhook and Dedupe is not stored
	Kind    Kind
	Event   []byte // the Event as JSON
	At      time.Time
}

// Delivery is a stored one.
type Delivery struct {
	ID        int64
	Webhook   string
	Kind      Kind
	Dedupe    string
	Event     []byte
	State     string
	Attempts  int
	CreatedAt time.Time
	NextAt    time.Time
	SentAt    time.Time // zero unless sent
	LastError string
}

// Outbox is where deliveries wait. Several gateways may share one; Claim hands each
// due row to one of them at a time.
type Outbox interface {
	// Enqueue stores the deliveries whose (Webhook, Dedupe) is not stored yet, due at
	// once, and ignores the others.
	Enqueue(ctx context.Context, ds []NewDelivery) error
	// Claim leases up to limit pending deliveries due at now, whose lease (if any) has
	// run out, to owner until now+lease, oldest first.
	Claim(ctx context.Context, owner string, now time.Time, lease time.Duration, limit int) ([]Delivery, error)
	// Finish records a try of a delivery owner holds: state is StateSent, StateFailed,
	// or StatePending with the next try at next. It releases the lease. A delivery no
	// longer held by owner (its lease ran out and another took it) is left alone.
	Finish(ctx context.Context, id int64, owner string, state string, attempts int, next time.Time, lastError string) error
	// Release gives up owner's leases without a try (a gateway stopping).
	Release(ctx context.Context, owner string) error
	// Recent lists the latest deliveries, newest first.
	Recent(ctx context.Context, limit int) ([]Delivery, error)
}

// Webhook is one receiver.
type Webhook struct {
	URL    string
	Secret string
	Format Format
	Kinds  []Kind // empty: all
}

// ID is a stable name for the webhook that does not reveal its URL (which may hold a
// token): the outbox stores it, and a reload with the same URL finds its deliveries.
func (w *Webhook) ID() string {
	sum := sha256.Sum256([]byte(w.URL))
	return hex.EncodeToString(sum[:8])
}

// Endpoint is the URL's scheme and host, all that is shown of it.
func (w *Webhook) Endpoint() string {
	u, err := url.Parse(w.URL)
	if err != nil || u.Host == "" {
		return "(invalid)"
	}
	return u.Scheme + "://" + u.Host
}

// Wants reports whether the webhook subscribes to kind.
func (w *Webhook) Wants(k Kind) bool { return len(w.Kinds) == 0 || slices.Contains(w.Kinds, k) }

// Retry policy defaults: a try every BaseBackoff doubling up to MaxBackoff, at most
// MaxAttempts tries, none after MaxAge.
const (
	DefaultBaseBackoff = 10 * time.Second
	DefaultMaxBackoff  = 10 * time.Minute
	DefaultMaxAttempts = 12
	DefaultMaxAge      = 24 * time.Hour
	DefaultLease       = 30 * time.Second
	// sendTimeout bounds one try; the lease is longer, so the row is not taken by
	// another gateway while it is being sent.
	sendTimeout = 10 * time.Second
	// pendingCap bounds the events waiting in memory for the outbox (a store away):
	// past it, new ones are dropped and counted.
	pendingCap = 1024
	claimBatch = 32
)

// Worker moves events into the outbox and deliveries out of it.
type Worker struct {
	Outbox   Outbox
	Webhooks []Webhook
	// Owner names this gateway in leases; unique per process.
	Owner string
	// Client sends the deliveries. Default: a client with sendTimeout. Whichever it is,
	// redirects are not followed.
	Client *http.Client
	// Now is the clock. Default: time.Now.
	Now                     func() time.Time
	BaseBackoff, MaxBackoff time.Duration
	MaxAttempts             int
	MaxAge, Lease           time.Duration
	// OnError hears about failures to reach the outbox (not about receivers' answers,
	// which are in the outbox).
	OnError func(what string, err error)

	mu      sync.Mutex
	pending []Event
	dropped int64
	wake    chan struct{}
}

func (w *Worker) init() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.wake == nil {
		w.wake = make(chan struct{}, 1)
	}
}

func (w *Worker) now() time.Time {
	if w.Now != nil {
		return w.Now()
	}
	return time.Now()
}

// Notify queues an event for the outbox. It never blocks on the database, so it may be
// called from a request's path; the run loop stores it.
func (w *Worker) Notify(e Event) {
	w.init()
	w.mu.Lock()
	if len(w.pending) >= pendingCap {
		w.dropped++
	} else {
		w.pending = append(w.pending, e)
	}
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// Dropped counts events lost because too many waited for the outbox.
func (w *Worker) Dropped() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.dropped
}

// Flush stores the events waiting in memory, one row per webhook that wants each. On
// failure they stay in memory for the next call.
func (w *Worker) Flush(ctx context.Context) error {
	w.mu.Lock()
	events := w.pending
	w.pending = nil
	w.mu.Unlock()
	if len(events) == 0 {
		return nil
	}
	var rows []NewDelivery
	for i := range events {
		e := &events[i]
		body, err := json.Marshal(e)
		if err != nil {
			continue
		}
		for j := range w.Webhooks {
			wh := &w.Webhooks[j]
			if wh.Wants(e.Kind) {
				rows = append(rows, NewDelivery{Webhook: wh.ID(), Dedupe: e.DedupeKey(), Kind: e.Kind, Event: body, At: e.At})
			}
		}
	}
	if len(rows) == 0 {
		return nil
	}
	if err := w.Outbox.Enqueue(ctx, rows); err != nil {
		events = w.sendLedgerDirect(ctx, events)
		w.mu.Lock()
		// Put them back in front of what arrived meanwhile, within the cap.
		keep := append(events, w.pending...)
		if over := len(keep) - pendingCap; over > 0 {
			w.dropped += int64(over)
			keep = keep[:pendingCap]
		}
		w.pending = keep
		w.mu.Unlock()
		return err
	}
	return nil
}

// sendLedgerDirect sends the ledger events among events straight to their webhooks,
// bypassing the outbox, and returns the events still to store. A journal that cannot
// drain almost always means the store is away, and then the outbox is too: waiting for
// it would tell the operator only once the trouble is over. Such a delivery has id 0, is
// tried once per Flush until every webhook took it, and is not deduplicated across
// gateways (each gateway's journal is its own subject anyway).
func (w *Worker) sendLedgerDirect(ctx context.Context, events []Event) []Event {
	var keep []Event
	for i := range events {
		e := &events[i]
		if e.Kind != KindLedger || !w.sendDirect(ctx, e) {
			keep = append(keep, *e)
		}
	}
	return keep
}

func (w *Worker) sendDirect(ctx context.Context, e *Event) bool {
	body, err := json.Marshal(e)
	if err != nil {
		return true // nothing to send, ever
	}
	d := &Delivery{ID: 0, Kind: e.Kind, Event: body}
	ok := true
	for j := range w.Webhooks {
		if wh := &w.Webhooks[j]; wh.Wants(e.Kind) && w.send(ctx, wh, d) != nil {
			ok = false
		}
	}
	return ok
}

// backoff is the wait after the attempts-th failed try.
func (w *Worker) backoff(attempts int) time.Duration {
	base, cap := w.BaseBackoff, w.MaxBackoff
	if base <= 0 {
		base = DefaultBaseBackoff
	}
	if cap <= 0 {
		cap = DefaultMaxBackoff
	}
	d := base << min(max(attempts-1, 0), 30)
	if d <= 0 || d > cap {
		d = cap
	}
	return d
}

// SendDue claims the deliveries due now and tries each once. It returns how many it
// tried.
func (w *Worker) SendDue(ctx context.Context) (int, error) {
	lease := w.Lease
	if lease <= 0 {
		lease = DefaultLease
	}
	due, err := w.Outbox.Claim(ctx, w.Owner, w.now(), lease, claimBatch)
	if err != nil {
		return 0, err
	}
	maxAttempts, maxAge := w.MaxAttempts, w.MaxAge
	if maxAttempts <= 0 {
		maxAttempts = DefaultMaxAttempts
	}
	if maxAge <= 0 {
		maxAge = DefaultMaxAge
	}
	var errs []error
	for i := range due {
		d := &due[i]
		wh := w.webhook(d.Webhook)
		attempts := d.Attempts + 1
		var sendErr error
		if wh == nil {
			sendErr = errors.New("the webhook is no longer configured")
		} else {
			sendErr = w.send(ctx, wh, d)
		}
		now := w.now()
		state, next, msg := StateSent, time.Time{}, ""
		if sendErr != nil {
			msg = sendErr.Error()
			next = now.Add(w.backoff(attempts))
			state = StatePending
			if wh == nil || attempts >= maxAttempts || next.Sub(d.CreatedAt) > maxAge {
				state = StateFailed
			}
		}
		if err := w.Outbox.Finish(ctx, d.ID, w.Owner, state, attempts, next, msg); err != nil {
			errs = append(errs, err)
		}
	}
	return len(due), errors.Join(errs...)
}

func (w *Worker) webhook(id string) *Webhook {
	for i := range w.Webhooks {
		if w.Webhooks[i].ID() == id {
			return &w.Webhooks[i]
		}
	}
	return nil
}

// maxErrorBody is how much of a refusing receiver's answer is kept, for the console.
const maxErrorBody = 200

// send makes one try. The error says what the receiver did, never the URL (which may
// hold a token).
func (w *Worker) send(ctx context.Context, wh *Webhook, d *Delivery) error {
	var e Event
	if err := json.Unmarshal(d.Event, &e); err != nil {
		return fmt.Errorf("stored event unreadable: %v", err)
	}
	body, err := Body(wh.Format, d.ID, &e)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, sendTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, wh.URL, bytes.NewReader(body))
	if err != nil {
		return errors.New("bad webhook URL")
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "Switchyard-Alerts/1")
	req.Header.Set("Switchyard-Delivery", strconv.FormatInt(d.ID, 10))
	req.Header.Set("Switchyard-Event", string(d.Kind))
	req.Header.Set(SignatureHeader, Sign(wh.Secret, time.Now(), body))
	client := http.Client{Timeout: sendTimeout}
	if w.Client != nil {
		client = *w.Client
	}
	// A redirect is not followed: the delivery would go, signed, to a host the
	// operator never named, with the webhook's URL (and the token in its path) as its
	// Referer. The 3xx is the receiver's answer, and a failed try.
	client.CheckRedirect = refuseRedirect
	resp, err := client.Do(req)
	if err != nil {
		// url.Error names the URL: keep only what went wrong.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Errorf("no answer: %v", err)
	}
	defer resp.Body.Close()
	snippet, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("status %d: %s", resp.StatusCode, bytes.ToValidUTF8(snippet, nil))
	}
	return nil
}

func refuseRedirect(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// Run stores events and sends deliveries until ctx ends, polling the outbox every poll
// (other gateways' rows, retries coming due) and at once when an event arrives. On
// return it releases its leases.
func (w *Worker) Run(ctx context.Context, poll time.Duration) {
	w.init()
	tick := time.NewTicker(poll)
	defer tick.Stop()
	// Told once per run of failures: a store that is away would otherwise fill the
	// log with the same line every poll.
	failing := false
	report := func(what string, err error) {
		if err == nil {
			failing = false
			return
		}
		if !failing && w.OnError != nil && ctx.Err() == nil {
			w.OnError(what, err)
		}
		failing = true
	}
	for {
		err := w.Flush(ctx)
		for err == nil {
			var n int
			n, err = w.SendDue(ctx)
			if n < claimBatch {
				break
			}
		}
		report("alerts' outbox in the store", err)
		select {
		case <-ctx.Done():
			rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = w.Flush(rctx)
			_ = w.Outbox.Release(rctx, w.Owner)
			cancel()
			return
		case <-tick.C:
		case <-w.wake:
		}
	}
}
