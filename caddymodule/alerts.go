package caddymodule

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/switchyard-gw/switchyard/alerts"
	"github.com/switchyard-gw/switchyard/console"
	"github.com/switchyard-gw/switchyard/limits"
	"github.com/switchyard-gw/switchyard/metering"
	"github.com/switchyard-gw/switchyard/routing"
)

// AlertsConfig sends alerts to webhooks: budget thresholds crossed, circuits opened and
// closed, a usage journal that cannot reach the database. Deliveries wait in the store's
// outbox, so alerts need a store.
type AlertsConfig struct {
	// Webhooks receive the alerts. At least one is required.
	Webhooks []WebhookConfig `json:"webhooks,omitempty"`
	// BudgetThresholds are the percents of a key's or project's budget whose crossing is
	// told, each from 1 to 1000. Default: 50, 80, 100.
	BudgetThresholds []int `json:"budget_thresholds,omitempty"`
	// LedgerAfter is how long this gateway's usage journal must fail to reach the
	// database before it is told. Default: 1m.
	LedgerAfter caddy.Duration `json:"ledger_after,omitempty"`
	// Poll is how often the outbox is looked at for deliveries coming due (retries, and
	// another gateway's rows whose lease ran out). Default: 2s.
	Poll caddy.Duration `json:"poll,omitempty"`
	// Backoff is the wait after a delivery's first failed try; it doubles with each
	// further one up to MaxBackoff. A delivery is given up after 12 tries or 24 hours,
	// whichever comes first. Default: 10s and 10m.
	Backoff    caddy.Duration `json:"backoff,omitempty"`
	MaxBackoff caddy.Duration `json:"max_backoff,omitempty"`
}

// WebhookConfig is one receiver of alerts.
type WebhookConfig struct {
	// URL is where deliveries are POSTed (http or https). Only its scheme and host are
	// ever shown: the path may hold a token. Required.
	URL string `json:"url"`
	// Secret signs each delivery (the Switchyard-Signature header); placeholders such as
	// {env.WEBHOOK_SECRET} are replaced at load. Never shown or logged. Required for the
	// json format; optional for slack, which does not check signatures.
	Secret string `json:"secret,omitempty"`
	// Format is the body: "json" (the event, its delivery id and a sentence) or "slack"
	// ({"text": ...}, for Slack's and compatible incoming webhooks). Default: json.
	Format string `json:"format,omitempty"`
	// Events are the kinds sent: budget, circuit, ledger. Default: all.
	Events []string `json:"events,omitempty"`
}

// Defaults of AlertsConfig.
var defaultBudgetThresholds = []int{50, 80, 100}

const (
	defaultLedgerAfter = time.Minute
	defaultAlertPoll   = 2 * time.Second
	// ledgerCheckEvery is how often the journal's state is looked at.
	ledgerCheckEvery = 5 * time.Second
)

// alertsRuntime is what a configuration with alerts runs.
type alertsRuntime struct {
	cfg        *AlertsConfig
	webhooks   []alerts.Webhook
	worker     *alerts.Worker
	watch      *limits.BudgetWatch
	observers  []healthObserver
	poll       time.Duration
	ledgerWait time.Duration
	cancel     context.CancelFunc
	done       chan struct{}
}

type healthObserver struct {
	health   *routing.Health
	observer *routing.CircuitObserver
}

// provisionAlerts checks the alerts block and prepares its worker; nothing runs until
// Start. It needs the store (the outbox) and the candidates' health.
func (a *App) provisionAlerts(repl *caddy.Replacer, outbox alerts.Outbox) error {
	ac := a.Alerts
	if ac == nil {
		return nil
	}
	if outbox == nil {
		return errors.New("alerts: need a store for their outbox (not `store off`)")
	}
	if len(ac.Webhooks) == 0 {
		return errors.New("alerts: webhooks: at least one is required")
	}
	rt := &alertsRuntime{cfg: ac, poll: time.Duration(ac.Poll), ledgerWait: time.Duration(ac.LedgerAfter)}
	if rt.poll <= 0 {
		rt.poll = defaultAlertPoll
	}
	if rt.ledgerWait <= 0 {
		rt.ledgerWait = defaultLedgerAfter
	}
	seen := map[string]bool{}
	for i, wc := range ac.Webhooks {
		wh, err := wc.build(repl)
		if err != nil {
			return fmt.Errorf("alerts: webhooks[%d]: %v", i, err)
		}
		if seen[wh.URL] {
			return fmt.Errorf("alerts: webhooks[%d]: url: %s is configured twice", i, wh.Endpoint())
		}
		seen[wh.URL] = true
		rt.webhooks = append(rt.webhooks, wh)
	}
	thresholds := ac.BudgetThresholds
	if len(thresholds) == 0 {
		thresholds = defaultBudgetThresholds
	}
	for _, t := range thresholds {
		if t < 1 || t > 1000 {
			return fmt.Errorf("alerts: budget_thresholds: %d is not a percent from 1 to 1000", t)
		}
	}
	thresholds = slices.Compact(slices.Sorted(slices.Values(thresholds)))

	logger := a.logger
	rt.worker = &alerts.Worker{
		Outbox: outbox, Webhooks: rt.webhooks, Owner: alertOwner(),
		BaseBackoff: time.Duration(ac.Backoff), MaxBackoff: time.Duration(ac.MaxBackoff),
		OnError: func(what string, err error) { logger.Warn(what, zap.Error(err)) },
	}
	worker := rt.worker
	rt.watch = &limits.BudgetWatch{Thresholds: thresholds, Notify: func(c limits.BudgetCrossing) {
		worker.Notify(alerts.Event{Kind: alerts.KindBudget, At: time.Now().UTC(), Budget: &alerts.BudgetEvent{
			Scope: string(c.Scope.Kind), ID: c.Scope.ID, Model: c.Scope.Model, Period: string(c.Budget.Period),
			PeriodStart: c.PeriodStart, Threshold: c.Threshold, LimitMicros: c.Budget.Micros, SpentMicros: c.SpentMicros,
		}})
	}}
	// Generation's health only: a sub-operation's circuit (token counts) is not a
	// candidate out of service.
	for _, up := range a.upstreams {
		model, candidate := up.ModelID, up.Candidate.Name
		obs := routing.CircuitObserver(func(c routing.CircuitChange) {
			ev := alerts.CircuitEvent{Model: model, Candidate: candidate, State: "closed"}
			if c.Opened {
				ev.State, ev.Reason = "open", string(c.Reason)
			}
			worker.Notify(alerts.Event{Kind: alerts.KindCircuit, At: c.At.UTC(), Circuit: &ev})
		})
		rt.observers = append(rt.observers, healthObserver{up.Health, &obs})
	}
	a.alerts = rt
	return nil
}

func (wc WebhookConfig) build(repl *caddy.Replacer) (alerts.Webhook, error) {
	wh := alerts.Webhook{URL: repl.ReplaceKnown(wc.URL, ""), Secret: repl.ReplaceKnown(wc.Secret, ""), Format: alerts.Format(wc.Format)}
	u, err := url.Parse(wh.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		// Not quoted: the URL may hold a token.
		return wh, errors.New("url: want an http or https URL with a host")
	}
	if u.User != nil {
		return wh, errors.New("url: credentials in the URL are not supported; use the secret")
	}
	switch wh.Format {
	case "":
		wh.Format = alerts.FormatJSON
	case alerts.FormatJSON, alerts.FormatSlack:
	default:
		return wh, fmt.Errorf("format: %q is neither json nor slack", wc.Format)
	}
	if wc.Secret != "" && wh.Secret == "" {
		return wh, fmt.Errorf("secret: %s resolves to an empty value", placeholderNames(wc.Secret))
	}
	if wh.Secret == "" && wh.Format == alerts.FormatJSON {
		return wh, errors.New("secret: required for the json format (receivers check the signature with it)")
	}
	for _, e := range wc.Events {
		k, err := alerts.ParseKind(e)
		if err != nil {
			return wh, fmt.Errorf("events: %v", err)
		}
		wh.Kinds = append(wh.Kinds, k)
	}
	return wh, nil
}

// alertOwner names this process in the outbox's leases.
func alertOwner() string {
	host, _ := os.Hostname()
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s/%d/%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// startAlerts runs the worker and starts listening: budgets, circuits, the journal.
func (a *App) startAlerts() {
	rt := a.alerts
	if rt == nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	rt.cancel, rt.done = cancel, make(chan struct{})
	if a.limiter != nil {
		a.limiter.WatchBudgets(rt.watch)
	}
	for _, o := range rt.observers {
		o.health.SetObserver(o.observer)
	}
	var wg sync.WaitGroup
	if ledger := a.ledger; ledger != nil {
		wg.Go(func() { watchLedger(ctx, ledger.Stats, rt.ledgerWait, ledgerCheckEvery, rt.worker.Notify) })
	}
	wg.Go(func() { rt.worker.Run(ctx, rt.poll) })
	go func() {
		wg.Wait()
		close(rt.done)
	}()
}

// stopAlerts stops listening and stops the worker, which stores what it heard and
// hands its leases back for the next configuration or another gateway.
func (a *App) stopAlerts() {
	rt := a.alerts
	if rt == nil || rt.cancel == nil {
		return
	}
	if a.limiter != nil {
		a.limiter.UnwatchBudgets(rt.watch)
	}
	for _, o := range rt.observers {
		o.health.RemoveObserver(o.observer)
	}
	rt.cancel()
	<-rt.done
}

// watchLedger tells once per run of failures when the journal has not reached the
// database for longer than after. It reads the ledger's state rather than hearing its
// OnError: the ledger is shared across reloads and reports only the start of a run, and
// the bound needs a clock anyway.
func watchLedger(ctx context.Context, stats func() metering.Stats, after, every time.Duration, notify func(alerts.Event)) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	w := ledgerWatch{after: after}
	for {
		if e := w.check(stats(), time.Now()); e != nil {
			notify(*e)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// ledgerWatch is watchLedger's memory between checks.
type ledgerWatch struct {
	after time.Duration
	since time.Time // when the current run of failures was first seen; zero: none
	told  bool
}

// check looks at the ledger's state at t and answers the event to send, if any.
func (w *ledgerWatch) check(s metering.Stats, t time.Time) *alerts.Event {
	switch {
	case s.LastError == nil:
		w.since, w.told = time.Time{}, false
	case w.since.IsZero():
		w.since = t
	case !w.told && t.Sub(w.since) >= w.after:
		w.told = true
		// Not the error's text: it may name the database's host.
		return &alerts.Event{Kind: alerts.KindLedger, At: t.UTC(), Ledger: &alerts.LedgerEvent{
			Journal: s.JournalID, FailingSince: w.since.UTC(), PendingBytes: s.PendingBytes,
		}}
	}
	return nil
}

// alertsView is GET /alerts' answer for the console and the admin API. Webhooks are
// shown by scheme and host; the secret never leaves the configuration.
func (a *App) alertsView(ctx context.Context, limit int) (*console.AlertsView, error) {
	rt := a.alerts
	v := &console.AlertsView{Configured: true, Webhooks: []console.AlertWebhook{}, Deliveries: []console.AlertDelivery{},
		BudgetThresholds: rt.watch.Thresholds, LedgerAfter: rt.ledgerWait.String()}
	endpoints := map[string]string{}
	for i := range rt.webhooks {
		wh := &rt.webhooks[i]
		events := []string{}
		for _, k := range wh.Kinds {
			events = append(events, string(k))
		}
		if len(events) == 0 {
			for _, k := range alerts.Kinds {
				events = append(events, string(k))
			}
		}
		endpoints[wh.ID()] = wh.Endpoint()
		v.Webhooks = append(v.Webhooks, console.AlertWebhook{ID: wh.ID(), Endpoint: wh.Endpoint(), Format: string(wh.Format), Events: events})
	}
	recent, err := a.outbox.Recent(ctx, limit)
	if err != nil {
		return nil, err
	}
	for _, d := range recent {
		row := console.AlertDelivery{ID: d.ID, Webhook: endpoints[d.Webhook], Kind: string(d.Kind), State: d.State,
			Attempts: d.Attempts, CreatedAt: d.CreatedAt, LastError: d.LastError}
		if row.Webhook == "" {
			row.Webhook = d.Webhook
		}
		var e alerts.Event
		if json.Unmarshal(d.Event, &e) == nil {
			row.Text = e.Text()
		}
		if d.State == alerts.StatePending {
			row.NextAt = &d.NextAt
		}
		if !d.SentAt.IsZero() {
			row.SentAt = &d.SentAt
		}
		v.Deliveries = append(v.Deliveries, row)
	}
	return v, nil
}
