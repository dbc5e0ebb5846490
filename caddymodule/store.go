package caddymodule

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/switchyard-gw/switchyard/access"
	"github.com/switchyard-gw/switchyard/auth"
	"github.com/switchyard-gw/switchyard/metering"
	"github.com/switchyard-gw/switchyard/store"
)

// StoreConfig says where keys live. SQLite in Caddy's data directory is the default;
// PostgreSQL lets several gateways share keys (a revocation reaches them all within a
// second).
type StoreConfig struct {
	// Driver is "sqlite" (default), "postgres", or "off" (static keys only).
	Driver string `json:"driver,omitempty"`
	// DSN is the SQLite file (default: switchyard/switchyard.db in Caddy's data
	// directory) or the PostgreSQL connection string. Placeholders such as
	// {env.SWITCHYARD_DSN} are replaced at load, keeping passwords out of the config.
	DSN string `json:"dsn,omitempty"`
}

// storePool shares one open store, its key cache and the cache's background work
// between the configurations that name the same store, so a reload neither reopens the
// database nor loses what the cache holds.
var storePool = caddy.NewUsagePool()

type sharedStore struct {
	store  *store.Store
	cache  *auth.Cache
	cancel context.CancelFunc
	done   chan struct{}
}

// Destruct stops the cache's background work (writing last-used times a final time)
// and closes the store, when no configuration uses it any more.
func (s *sharedStore) Destruct() error {
	s.cancel()
	<-s.done
	return s.store.Close()
}

func (c *StoreConfig) resolve(repl *caddy.Replacer) (driver, dsn string, err error) {
	driver = "sqlite"
	if c != nil && c.Driver != "" {
		driver = c.Driver
	}
	if c != nil {
		dsn = repl.ReplaceKnown(c.DSN, "")
	}
	switch driver {
	case "off":
		return driver, "", nil
	case "sqlite":
		if dsn == "" {
			dsn = filepath.Join(caddy.AppDataDir(), "switchyard", "switchyard.db")
		}
	case "postgres":
		if dsn == "" {
			return "", "", fmt.Errorf("store: postgres needs a connection string")
		}
	default:
		return "", "", fmt.Errorf("store: %q is not a store driver (sqlite, postgres, off)", driver)
	}
	return driver, dsn, nil
}

// openStore joins (or opens) the shared store of this configuration.
func (a *App) openStore(ctx caddy.Context, repl *caddy.Replacer, static *auth.StaticKeys) error {
	driver, dsn, err := a.Store.resolve(repl)
	if err != nil {
		return err
	}
	if driver == "off" {
		a.verifier = static
		return nil
	}
	logger := a.logger
	key := driver + "\x00" + dsn
	shared, _, err := storePool.LoadOrNew(key, func() (caddy.Destructor, error) {
		// A database that cannot be reached is an outage, not a reason to stay down:
		// Connect keeps trying in the background every key poll, keys are checked from
		// the snapshot meanwhile, and usage waits in the journal.
		st, err := store.Connect(ctx, driver, dsn, store.Options{
			Retry: auth.DefaultRefreshInterval,
			OnOutage: func(o store.Outage) {
				if o.Down {
					logger.Warn("key store unreachable: keys are checked from memory and usage stays in the journal until it answers",
						zap.String("driver", driver), zap.String("failing", o.Failing), zap.Error(o.Err))
				} else {
					logger.Info("key store answering again", zap.String("driver", driver),
						zap.String("was_failing", o.Failing), zap.Duration("outage", o.Lasted))
				}
			},
		})
		if err != nil {
			// The message names the driver only: a DSN may hold a password.
			return nil, fmt.Errorf("store: opening the %s key store: %v", driver, err)
		}
		cache := auth.OpenCache(ctx, st, auth.CacheOptions{
			Snapshot: snapshotPath(driver, dsn),
			StoreID:  store.Fingerprint(driver, dsn),
			Log: func(msg string, err error) {
				if err != nil {
					logger.Warn(msg, zap.Error(err))
				} else {
					logger.Warn(msg)
				}
			},
		})
		runCtx, cancel := context.WithCancel(context.Background())
		s := &sharedStore{store: st, cache: cache, cancel: cancel, done: make(chan struct{})}
		go func() {
			defer close(s.done)
			// The store reports an outage once when it starts and once when it ends;
			// the cache's failed polls (four a second) go to the debug level only.
			cache.Run(runCtx, auth.DefaultRefreshInterval, auth.DefaultTouchInterval, func(err error) {
				logger.Debug("key store poll failed", zap.Error(err))
			})
		}()
		return s, nil
	})
	if err != nil {
		return err
	}
	a.storeKey = key
	s := shared.(*sharedStore)
	a.spend = s.store.Spend
	a.outbox = s.store
	a.manager = &auth.Manager{
		Store:    s.store,
		Projects: s.store,
		Cache:    s.cache,
		ModelExists: func(id string) bool {
			_, ok := a.catalog.Lookup(id)
			return ok
		},
		// The admin API answers a store failure with a bare 500 that points here.
		OnError: func(call string, err error) {
			logger.Error("admin API call failed in the key store", zap.String("call", call), zap.Error(err))
		},
	}
	// Static keys from the configuration first, then the store.
	a.verifier = auth.Verifiers{static, s.cache}
	// Usage goes to the same store, through this gateway's journal; *store.Store
	// implements every usage interface (store/ asserts it at compile time).
	a.usageReader = loggingReader{s.store, logger}
	a.people, _ = any(s.store).(access.Store)
	a.requestLog = loggingRequestLog{s.store, logger}
	a.latencyReader = loggingLatencyReader{s.store, logger}
	// The ledger opens when the app starts, not here: `caddy validate` provisions a
	// configuration in a process of its own while the gateway may be running, and must
	// not touch (or lock) that gateway's journal.
	a.ledgerSink, a.ledgerDir = s.store, a.journalDir(driver, dsn)
	a.ledgerReady = make(chan struct{})
	a.refusalLog = &refusalSampler{}
	return nil
}

// snapshotPath is where the key cache keeps its snapshot: beside the SQLite file, or
// in Caddy's data directory, where the journal's default place is too.
func snapshotPath(driver, dsn string) string {
	if driver == "sqlite" {
		return filepath.Join(filepath.Dir(dsn), "key-snapshot.json")
	}
	return filepath.Join(caddy.AppDataDir(), "switchyard", "key-snapshot.json")
}

// loggingReader logs a failed usage query: the admin API answers it with a bare 500
// that points to the log.
type loggingReader struct {
	metering.Reader
	logger *zap.Logger
}

func (r loggingReader) QueryUsage(ctx context.Context, q metering.Query) ([]metering.Row, error) {
	rows, err := r.Reader.QueryUsage(ctx, q)
	if err != nil {
		r.logger.Error("admin API call failed in the key store", zap.String("call", "usage query"), zap.Error(err))
	}
	return rows, err
}

// loggingRequestLog logs why a request log query failed, which the API answers with a
// bare 500.
type loggingRequestLog struct {
	metering.RequestLog
	logger *zap.Logger
}

func (l loggingRequestLog) ListRequests(ctx context.Context, q metering.RequestQuery) (metering.RequestPage, error) {
	page, err := l.RequestLog.ListRequests(ctx, q)
	if err != nil && !errors.Is(err, metering.ErrBadCursor) {
		l.logger.Error("admin API call failed in the key store", zap.String("call", "request log"), zap.Error(err))
	}
	return page, err
}

// loggingLatencyReader logs a failed latency query, which the API answers with a bare 500.
type loggingLatencyReader struct {
	metering.LatencyReader
	logger *zap.Logger
}

func (r loggingLatencyReader) QueryLatency(ctx context.Context, from, to time.Time) ([]metering.LatencyRow, error) {
	rows, err := r.LatencyReader.QueryLatency(ctx, from, to)
	if err != nil {
		r.logger.Error("admin API call failed in the key store", zap.String("call", "latency query"), zap.Error(err))
	}
	return rows, err
}
